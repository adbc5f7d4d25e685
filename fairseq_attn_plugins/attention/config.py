"""Command-line flags shared by all pieces: which pieces run, and the backend."""

from typing import List

from .core import BACKENDS
from .piece import PIECES, AttentionPiece, AttentionSite, PieceConfigError


def add_attention_args(parser) -> None:
    group = parser.add_argument_group("attention plugins")
    group.add_argument(
        "--attn-pieces", type=str, metavar="NAMES",
        help="comma-separated attention pieces to combine, from: "
             + ", ".join(sorted(PIECES)) + " (default: set by --arch; '' = none)",
    )
    group.add_argument(
        "--attn-backend", type=str, metavar="BACKEND",
        help="attention backend: 'auto' (fused scaled_dot_product_attention whenever every "
             "piece allows it; on CUDA flex_attention for relpos kv/tied and long CSAN windows), "
             "'fused', 'explicit', or 'flex' (flex_attention for relpos kv/tied and band-masked "
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


def selected_pieces(args) -> List[type]:
    names = [n.strip() for n in str(args.attn_pieces or "").split(",") if n.strip()]
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


def build_pieces(args, site: AttentionSite) -> List[AttentionPiece]:
    pieces = []
    for cls in selected_pieces(args):
        piece = cls.build(args, site)
        if piece is not None:
            pieces.append(piece)
    return pieces
