"""The pieces described from their declarations: flags, defaults, allowed values, help.

One source for the command ``fairseq-attn-pieces`` (:mod:`..cli.pieces`) and for the flag
tables of the piece docs (``docs/pieces/<piece>.md``, between ``<!-- flags: NAME -->`` and
``<!-- /flags -->``; ``fairseq-attn-pieces --update-docs docs/pieces`` rewrites them, a test
checks they agree). Nothing here is written by hand per piece: a new piece is listed as
soon as it is registered.
"""

import argparse
import re
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

from .piece import PIECES, AttentionPiece, AttentionSite
from .settings import LAYERS, SIDES_ROLE, Setting, flag_of


def allowed(s: Setting) -> str:
    """The values a setting accepts, in words."""
    if s.role == LAYERS:
        return "0-based layers: '0', '0,1,2', '0-2' or 'all'"
    if s.role == SIDES_ROLE:
        return "'encoder', 'decoder' or 'encoder,decoder' ('both')"
    if s.choices is not None:
        return ", ".join(repr(c) for c in s.choices)
    hi = flag_of(s.hi) if isinstance(s.hi, str) else s.hi
    if s.type is int:
        kind = "odd integer" if s.odd else "integer"
        return f"{kind} >= {s.lo}" + (f", <= {hi}" if hi is not None else "") + (f", {s.rule}" if s.rule else "")
    if s.type is float:
        if s.positive:
            return "number > 0" + (f", <= {hi}" if hi is not None else "")
        lo = f"[{s.lo}" if s.lo is not None else "(-inf"
        return f"number in {lo}, {hi if hi is not None else 'inf'}{')' if s.hi_open or hi is None else ']'}"
    return "text (see help)"


def rows(cls) -> List[Tuple[str, str, str, str]]:
    """(flag, default, allowed values, help) for every flag the piece accepts."""
    out = []
    for s in cls.all_settings():
        help_text = s.help
        if s in cls.unused_settings:
            help_text = f"accepted and unused (a flag of a sibling piece): {help_text}"
        out.append((s.flag, repr(s.default), allowed(s), help_text))
    return out


def capabilities(cls) -> str:
    """The piece's declared capabilities, one line."""
    fused = ("fused" if cls.fused_ok and not cls.fused_with else
             "explicit only" if not cls.fused_ok else
             "fused with " + ", ".join(f"{flag_of(k)} {'/'.join(map(str, v))}"
                                       for k, v in cls.fused_with.items()) + ", else explicit")
    sides = "sides: " + ("/".join(cls.sides) if cls.sides else "set by its flag")
    # a piece that declares its distance terms runs, alone in its layer, the kernels' paths
    distance = ("distance terms (alone in a layer: --attn-backend triton runs them)"
                if cls.distance_terms is not AttentionPiece.distance_terms else "")
    parts = [fused, sides, "incremental decoding" if cls.incremental_ok else "no incremental decoding"]
    if cls.expands_kv:
        parts.append("widens the key axis")
    if distance:
        parts.append(distance)
    return "; ".join(parts)


def markdown_table(cls) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| flag | default | allowed | help |", "|---|---|---|---|"]
    lines += [f"| `{f}` | `{d}` | {cell(a)} | {cell(h)} |" for f, d, a, h in rows(cls)]
    return "\n".join(lines)


def summary(cls) -> str:
    """The first paragraph of a piece's docstring, whole, on one line."""
    paragraph = (cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(paragraph.split()).replace(" See module docstring.", "")


def text_listing(names: Optional[List[str]] = None) -> str:
    """Every piece (or ``names``) with its capabilities and flags, for a terminal."""
    blocks = []
    for name in names or sorted(PIECES):
        cls = PIECES[name]
        lines = [f"{name}: {summary(cls)}", f"  {capabilities(cls)}"]
        for f, d, a, h in rows(cls):
            lines += [f"  {f} (default {d}; {a})", f"      {h}"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def arch_layers(args: argparse.Namespace) -> str:
    """The pieces per layer of an architecture at its defaults (``args``: the namespace its
    defaults filled, by the caller who knows the architecture), e.g.
    ``--attn-pieces 'csan2d': encoder 0-2: csan2d; encoder 3-5: none; decoder 0-5: none``, then
    each active piece's flags with their values (:func:`piece_values`)."""
    from .flags import validate_attention_args

    validate_attention_args(args, fairseq_namespace=True)
    return "\n".join([f"--attn-pieces {args.attn_pieces!r}: " + config_layers(args)] + piece_values(args))


def piece_values(args) -> List[str]:
    """Each active piece's flags with their values in ``args``, one line per piece, e.g.
    ``csan2d: --csan-window 11, --csan-heads 3, ...``."""
    from .flags import selected_pieces

    return [f"{cls.name}: " + ", ".join(f"{s.flag} {getattr(args, s.name)!r}" for s in cls.all_settings()
                                         if s not in cls.unused_settings)
            for cls in selected_pieces(args)]


def config_layers(args) -> str:
    """The active pieces per layer of a resolved model configuration (an architecture's
    defaults, a checkpoint's or a run record's model flags), e.g.
    ``encoder 0-2: csan2d; encoder 3-5: none; decoder 0-5: none``."""
    from .flags import per_layer, selected_pieces

    layers = []
    for side in ("encoder", "decoder"):
        n, heads, dim = (getattr(args, f"{side}_{k}") for k in ("layers", "attention_heads", "embed_dim"))
        for i in range(n):
            site = AttentionSite(side, i, n, heads, dim // heads)
            names = [c.name for c in selected_pieces(args) if c.covers(args, site)]
            layers.append(SimpleNamespace(site=site, names=",".join(names) or "none"))
    return per_layer(layers, lambda m: m.names)


def model_pieces(model: Dict) -> Dict:
    """What a run record's ``model`` (every model flag fairseq resolved) trained:
    ``{"arch", "pieces": [active piece names], "pieces_per_layer": config_layers}``. Flags a
    record lacks take the plugin's defaults (:func:`.flags.attention_defaults`, as for old
    checkpoints: a stock Transformer has no piece); PieceConfigError for pieces unknown here."""
    from .flags import attention_defaults, selected_pieces

    args = argparse.Namespace(**model)
    attention_defaults(args)
    pieces = [c.name for c in selected_pieces(args)]
    sized = all(f"{side}_{k}" in model for side in ("encoder", "decoder")
                for k in ("layers", "attention_heads", "embed_dim"))
    return {"arch": model.get("arch"), "pieces": pieces,
            "pieces_per_layer": config_layers(args) if sized else None}


FLAG_TABLES = re.compile(r"(<!-- flags: (?P<name>[\w]+) -->\n)(?P<body>.*?)(<!-- /flags -->)", re.S)


def doc_blocks(text: str) -> Dict[str, str]:
    """piece name -> the flag table between its markers in a doc."""
    return {m["name"]: m["body"].strip() for m in FLAG_TABLES.finditer(text)}


def update_doc(text: str) -> str:
    """The doc with every flag table regenerated from the declarations."""
    return FLAG_TABLES.sub(lambda m: f"{m.group(1)}{markdown_table(PIECES[m['name']])}\n{m.group(4)}", text)

