"""Command-line flags shared by all pieces: which pieces run, and the backend.

``--attn-pieces`` is the complete list of active pieces: given, it REPLACES the
pieces of ``--arch`` (``--arch transformer_csan2d_wmt_en_de --attn-pieces relpos``
runs relpos alone; ``--attn-pieces none`` runs no piece, an empty value is
refused). A flag of a piece that is not active, set explicitly on the command
line (``--csan-window 5`` there), is refused at model build naming the flag and
the active pieces (:func:`check_inactive_flags`), so that a setting can never be
ignored silently; the model build logs the active pieces per layer.
"""

import difflib
from typing import Dict, List, Tuple

from .backends import check_backend, check_flex_compile
from .piece import PIECES, AttentionPiece, AttentionSite, PieceConfigError, check_one_widener


def add_attention_args(parser) -> None:
    group = parser.add_argument_group("attention plugins")
    group.add_argument(
        "--attn-pieces", type=str, metavar="NAMES",
        help="comma-separated attention pieces to combine, from: "
             + ", ".join(sorted(PIECES)) + " (default: set by --arch; when given it replaces the "
             "arch's pieces; 'none' = no piece). Flags of pieces not listed are refused",
    )
    group.add_argument(
        "--attn-backend", type=str, metavar="BACKEND",
        help="attention backend: 'auto' (fused scaled_dot_product_attention whenever every "
             "piece allows it; on CUDA flex_attention for relpos kv/tied, alibi and long CSAN windows), "
             "'fused', 'explicit', 'flex' (flex_attention for relpos kv/tied, alibi and band-masked "
             "layers on any device; needs --attention-dropout 0), 'triton' (the Triton kernels for "
             "t5bias, alibi and relpos, encoder and decoder self-attention; CUDA, needs "
             "--attention-dropout 0) or 'tuned' (per shape class the fastest of the paths that can run "
             "it, timed on its first call and kept in a cache file: FAIRSEQ_ATTN_CACHE_DIR, default "
             "~/.cache/fairseq_attn; fairseq-attn-bench --tune fills it) (default auto)",
    )
    group.add_argument(
        "--attn-flex-compile", type=str, metavar="MODE",
        help="how the flex_attention paths are compiled: 'auto' (inductor on CUDA, eager "
             "elsewhere), 'inductor', 'aot_eager' (dynamo's capture and guards without "
             "inductor: checks on CPU how often CUDA would compile) or 'none' (eager) "
             "(default auto)",
    )
    for cls in PIECES.values():
        cls.add_args(group)


#: the core's own flags, beside the pieces' (:func:`piece_flags`)
CORE_FLAGS = ("attn_pieces", "attn_backend", "attn_flex_compile")
#: the model's settings that the core and the pieces read besides the flags: a namespace built
#: for the core holds these, the flags, and nothing else (:func:`check_known_keys`); the first
#: four are required (the layers and heads the pieces' layer lists and bounds refer to)
MODEL_KEYS = ("encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
              "encoder_embed_dim", "decoder_embed_dim", "attention_dropout", "dropout",
              "max_source_positions", "max_target_positions", "no_token_positional_embeddings",
              "ddp_backend", "arch", "attn_explicit_flags")
REQUIRED_MODEL_KEYS = MODEL_KEYS[:4]


def attention_defaults(args) -> None:
    """Fill every plugin flag missing from ``args`` (also for old checkpoints). A namespace built
    for the core (plain torch: no architecture function ran on it, :func:`finished_configuration`)
    has the piece flags it holds noted first as the user's, as the architecture functions note the
    command line's (:func:`record_explicit_flags`): a flag of a piece that is not active is then
    refused on both routes (:func:`check_inactive_flags`)."""
    if not finished_configuration(args):
        args.attn_explicit_flags = explicit_flags(args)
    args.attn_pieces = getattr(args, "attn_pieces", "")
    args.attn_backend = getattr(args, "attn_backend", "auto")
    args.attn_flex_compile = getattr(args, "attn_flex_compile", "auto")
    for cls in PIECES.values():
        cls.set_defaults(args)


def check_defaults_filled(args) -> None:
    """One line instead of an AttributeError deep in a piece: ``args`` must have been through
    :func:`attention_defaults` (which fills every flag not set)."""
    missing = [k for k in CORE_FLAGS + tuple(piece_flags()) if not hasattr(args, k)]
    if missing:
        raise PieceConfigError(
            f"the namespace lacks {', '.join(missing[:3])}"
            + (f" and {len(missing) - 3} more flags" if len(missing) > 3 else "")
            + ": call attention_defaults(args) first (it fills every flag not set with its default)")


def check_known_keys(args) -> None:
    """Refuse a key of a namespace built for the core that no piece or core flag declares and
    the core does not read (:data:`MODEL_KEYS`): a misspelt flag (``csan_windw``) would be set
    where nothing reads it. One line with the nearest names."""
    known = set(CORE_FLAGS) | set(piece_flags()) | set(MODEL_KEYS)
    for key in vars(args):
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=3)
            raise PieceConfigError(
                f"{key!r} is no flag of a piece or of the core, nor a model setting the core reads"
                + (f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else "")
                + f"; a namespace for the core holds the flags (fairseq-attn-pieces lists them, "
                  f"'_' for '-') and {', '.join(MODEL_KEYS[:-1])} (a fairseq namespace, whose "
                  f"names fairseq checked: validate_attention_args(args, fairseq_namespace=True))")



def finished_configuration(args) -> bool:
    """Whether an architecture function already ran on ``args`` (a checkpoint's configuration,
    or the second call fairseq makes): it then holds ``decoder_input_dim``, which fairseq's
    Transformer architectures set and no command line can (it is no flag), or the record."""
    return hasattr(args, "attn_explicit_flags") or hasattr(args, "decoder_input_dim")


def piece_flags() -> Dict[str, Tuple[str, ...]]:
    """attribute of each piece flag -> the pieces owning it (shared flags have several)."""
    owners: Dict[str, List[str]] = {}
    for name, cls in PIECES.items():
        for s in cls.all_settings():
            owners.setdefault(s.name, []).append(name)
    return {dest: tuple(sorted(o)) for dest, o in sorted(owners.items())}


def record_explicit_flags(args) -> None:
    """Note which piece flags the command line set, before any default fills them.

    Called by every ``transformer_attn`` architecture function, which fairseq runs right
    after parsing (model flags have no argparse defaults, so only the user's are present).
    fairseq runs the arch function again on a checkpoint's configuration, which is finished
    (:func:`finished_configuration`, also one saved before this record existed): nothing is
    recorded, nothing refused."""
    if finished_configuration(args):
        return
    if hasattr(args, "attn_pieces") and not str(args.attn_pieces or "").strip():
        raise PieceConfigError(
            f"--attn-pieces {args.attn_pieces!r} is empty: it would train the baseline "
            f"without a word; expected 'none' (no piece) or pieces from {sorted(PIECES)}"
        )
    args.attn_explicit_flags = explicit_flags(args)


def explicit_flags(args) -> str:
    """The piece flags ``args`` holds before any default fills them: the user's (comma-separated)."""
    return ",".join(dest for dest in piece_flags() if hasattr(args, dest))


def check_inactive_flags(args, names: List[str], fairseq_namespace: bool = True) -> None:
    """Refuse an explicitly set flag of a piece that is not among ``names``, named as the user set
    it: the command line's flag (``--csan-window``), or a plain-torch namespace's key (``csan_window``)."""
    explicit = [d for d in str(getattr(args, "attn_explicit_flags", "") or "").split(",") if d]
    owners = piece_flags()
    for dest in explicit:
        owning = owners.get(dest, ())
        if owning and not set(owning) & set(names):
            if not fairseq_namespace:
                raise PieceConfigError(
                    f"{dest}={getattr(args, dest)!r} belongs to {' / '.join(owning)}, which is not active: the "
                    f"active pieces are {names or 'none'} (attn_pieces={args.attn_pieces!r}): add "
                    f"{' or '.join(owning)} to attn_pieces, or drop {dest}")
            flag = "--" + dest.replace("_", "-")
            arch = getattr(args, "arch", None)
            raise PieceConfigError(
                f"{flag} belongs to {' / '.join(owning)}, which is not active: the active pieces are "
                f"{names or 'none'} (--attn-pieces {args.attn_pieces!r}"
                + (f", --arch {arch}" if arch else "") + "). --attn-pieces replaces the pieces of "
                f"--arch: add {' or '.join(owning)} to --attn-pieces, or drop {flag}"
            )


def selected_pieces(args) -> List[type]:
    """The piece classes of ``--attn-pieces`` (``none`` and an empty value: no piece)."""
    names = [n.strip() for n in str(args.attn_pieces or "").split(",") if n.strip()]
    if names == ["none"]:
        return []
    if "none" in names:
        raise PieceConfigError(f"--attn-pieces: 'none' stands alone (got {args.attn_pieces!r})")
    unknown = [n for n in names if n not in PIECES]
    if unknown:
        raise PieceConfigError(
            f"--attn-pieces: unknown piece(s) {unknown}; allowed: {sorted(PIECES)}"
        )
    if len(set(names)) != len(names):
        raise PieceConfigError(f"--attn-pieces: a piece is listed twice in {names}")
    return [PIECES[n] for n in names]


def validate_attention_args(args, fairseq_namespace: bool = False) -> None:
    """Check every flag and the compatibility of the chosen pieces; raise naming the flag.

    ``args`` is by default a namespace built for the core (plain torch): its flags filled by
    :func:`attention_defaults`, the sizes of :data:`REQUIRED_MODEL_KEYS` given, and no key the
    core does not know (:func:`check_known_keys`). ``fairseq_namespace``: ``args`` holds all of
    fairseq's settings, whose names fairseq's parser checked (a checkpoint's are kept as saved,
    flags of earlier versions included): only the values are checked."""
    check_defaults_filled(args)
    missing = [k for k in REQUIRED_MODEL_KEYS if not hasattr(args, k)]
    if missing:
        raise PieceConfigError(f"the namespace lacks {', '.join(missing)}: the model's sizes, "
                               f"which the pieces' layer lists and head counts refer to")
    if not fairseq_namespace:
        check_known_keys(args)
    classes = selected_pieces(args)
    names = [c.name for c in classes]
    check_inactive_flags(args, names, fairseq_namespace)
    for c in classes:
        for other, why in c.conflicts.items():
            if other in names:
                raise PieceConfigError(f"--attn-pieces: {c.name} and {other} conflict: {why}")
    check_one_widener(classes)
    for c in classes:
        c.validate(args)
    check_backend(args.attn_backend, [c.name for c in classes if not c.fused_ok_with(args)],
                  getattr(args, "attention_dropout", 0.0),
                  [c.name for c in classes if c.distance_terms is not AttentionPiece.distance_terms])
    check_flex_compile(args.attn_flex_compile)


def pieces_summary(modules) -> str:
    """One line: the active pieces per layer of ``SelfAttention`` modules, e.g.
    ``encoder 0-2: csan2d; encoder 3-5: none; decoder 0-5: none``."""
    return per_layer(modules, lambda m: ",".join(p.name for p in m.pieces) or "none")


def explicit_summary(modules) -> str:
    """One line: the layers whose training calls run the explicit path, and why, e.g.
    ``encoder 0-5: pieces ['chained'] need the probability matrix`` ("" if none)."""
    return per_layer([m for m in modules if m.why_explicit()], lambda m: m.why_explicit())


def per_layer(modules, label) -> str:
    parts: List[str] = []
    for side in ("encoder", "decoder"):
        layers = sorted((m.site.layer_idx, label(m)) for m in modules if m.site.side == side)
        i = 0
        while i < len(layers):
            j = i
            while j + 1 < len(layers) and layers[j + 1][1] == layers[i][1] and layers[j + 1][0] == layers[j][0] + 1:
                j += 1
            span = f"{layers[i][0]}" if i == j else f"{layers[i][0]}-{layers[j][0]}"
            parts.append(f"{side} {span}: {layers[i][1]}")
            i = j + 1
    return "; ".join(parts)


def build_pieces(args, site: AttentionSite) -> List[AttentionPiece]:
    """The pieces of ``args`` (checked by :func:`validate_attention_args`) active at ``site``."""
    check_defaults_filled(args)
    pieces = []
    for cls in selected_pieces(args):
        piece = cls.build(args, site)
        if piece is not None:
            pieces.append(piece)
    return pieces
