"""Command-line flags shared by all pieces: which pieces run, and the backend.

``--attn-pieces`` is the complete list of active pieces: given, it REPLACES the
pieces of ``--arch`` (``--arch transformer_csan2d_wmt_en_de --attn-pieces relpos``
runs relpos alone; ``--attn-pieces none`` runs no piece, an empty value is
refused). A flag of a piece that is not active, set explicitly on the command
line (``--csan-window 5`` there), is refused at model build naming the flag and
the active pieces (:func:`check_inactive_flags`), so that a setting can never be
ignored silently; the model build logs the active pieces per layer.
"""

from typing import Dict, List, Tuple

from .core import BACKENDS
from .piece import PIECES, AttentionPiece, AttentionSite, PieceConfigError


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
             "'fused', 'explicit', or 'flex' (flex_attention for relpos kv/tied, alibi and band-masked "
             "layers on any device; needs --attention-dropout 0) (default auto)",
    )
    for cls in PIECES.values():
        cls.add_args(group)


def attention_defaults(args) -> None:
    """Fill every plugin flag missing from ``args`` (also for old checkpoints)."""
    args.attn_pieces = getattr(args, "attn_pieces", "")
    args.attn_backend = getattr(args, "attn_backend", "auto")
    for cls in PIECES.values():
        cls.set_defaults(args)


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
    A namespace that went through ``attention_defaults`` already is a finished configuration
    (fairseq runs the arch function again on a checkpoint's configuration): one saved before
    this record existed holds ``attn_backend`` and the flags of every piece registered then
    (pieces registered later lack theirs): nothing is recorded, nothing refused."""
    if hasattr(args, "attn_explicit_flags"):
        return
    flags = piece_flags()
    present = sorted(dest for dest in flags if hasattr(args, dest))
    finished = len(present) == len(flags) or (hasattr(args, "attn_backend") and 2 * len(present) > len(flags))
    if not finished:
        if hasattr(args, "attn_pieces") and not str(args.attn_pieces or "").strip():
            raise PieceConfigError(
                f"--attn-pieces {args.attn_pieces!r} is empty: it would train the baseline "
                f"without a word; expected 'none' (no piece) or pieces from {sorted(PIECES)}"
            )
        args.attn_explicit_flags = ",".join(present)


def check_inactive_flags(args, names: List[str]) -> None:
    """Refuse an explicitly set flag of a piece that is not among ``names``."""
    explicit = [d for d in str(getattr(args, "attn_explicit_flags", "") or "").split(",") if d]
    owners = piece_flags()
    for dest in explicit:
        owning = owners.get(dest, ())
        if owning and not set(owning) & set(names):
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


def validate_attention_args(args) -> None:
    """Check every flag and the compatibility of the chosen pieces; raise naming the flag."""
    if args.attn_backend not in BACKENDS:
        raise PieceConfigError(
            f"--attn-backend must be one of {list(BACKENDS)} (got {args.attn_backend!r})"
        )
    if args.attn_backend == "flex":
        from . import flex

        if not flex.HAVE_FLEX:
            raise PieceConfigError("--attn-backend flex needs torch.nn.attention.flex_attention "
                                   "(torch >= 2.9)")
        if getattr(args, "attention_dropout", 0.0):
            raise PieceConfigError(
                f"--attn-backend flex: flex_attention has no attention dropout; needs "
                f"--attention-dropout 0 (got {args.attention_dropout})")
    classes = selected_pieces(args)
    names = [c.name for c in classes]
    check_inactive_flags(args, names)
    for c in classes:
        for other, why in c.conflicts.items():
            if other in names:
                raise PieceConfigError(f"--attn-pieces: {c.name} and {other} conflict: {why}")
    wideners = [c.name for c in classes if c.expands_kv]
    if len(wideners) > 1:
        raise PieceConfigError(
            f"--attn-pieces: {' and '.join(wideners)} conflict: each widens the key axis "
            f"with other heads' keys; at most one such piece per model"
        )
    for c in classes:
        c.validate(args)
    if args.attn_backend == "fused":
        slow = [c.name for c in classes if not c.fused_ok_with(args)]
        if slow:
            raise PieceConfigError(
                f"--attn-backend fused: pieces {slow} need the explicit path with these "
                f"settings; use --attn-backend auto or explicit"
            )


def pieces_summary(modules) -> str:
    """One line: the active pieces per layer of ``PluginSelfAttention`` modules, e.g.
    ``encoder 0-2: csan2d; encoder 3-5: none; decoder 0-5: none``."""
    parts: List[str] = []
    for side in ("encoder", "decoder"):
        layers = sorted((m.site.layer_idx, ",".join(p.name for p in m.pieces) or "none")
                        for m in modules if m.site.side == side)
        i = 0
        while i < len(layers):
            j = i
            while j + 1 < len(layers) and layers[j + 1][1] == layers[i][1]:
                j += 1
            span = f"{layers[i][0]}" if i == j else f"{layers[i][0]}-{layers[j][0]}"
            parts.append(f"{side} {span}: {layers[i][1]}")
            i = j + 1
    return "; ".join(parts)


def build_pieces(args, site: AttentionSite) -> List[AttentionPiece]:
    pieces = []
    for cls in selected_pieces(args):
        piece = cls.build(args, site)
        if piece is not None:
            pieces.append(piece)
    return pieces
