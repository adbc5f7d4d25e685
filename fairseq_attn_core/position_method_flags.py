"""What the position-method pieces (``rope``, ``alibi``, ``t5bias``) share.

Each of these methods is, in its paper, the model's only source of word order:
RoFormer (Su et al. 2021), ALiBi (Press et al. 2022) and T5 (Raffel et al. 2020)
have no absolute position embeddings. So each piece's ``--<prefix>-abs-pos``
defaults to ``drop``, which sets fairseq's ``--no-token-positional-embeddings``
at model build (with a log line); fairseq's flag removes them on both sides,
so ``drop`` needs the piece on at least one layer of encoder and decoder.
``keep`` keeps the sinusoidal embeddings as well.

The three methods are alternatives to each other and to Shaw et al.'s relative
positions: :data:`POSITION_CONFLICTS` refuses any two of them together.
"""

import logging
from typing import Dict, Tuple

from .settings import Choice, Layers, PieceConfigError, Setting, Sides

logger = logging.getLogger(__name__)

ABS_POS = ("drop", "keep")

_METHODS = {
    "rope": "rotary position embedding",
    "alibi": "ALiBi's linear distance penalty",
    "t5bias": "T5's bucketed relative bias",
    "relpos": "Shaw et al.'s relative positions",
}


def position_conflicts(name: str) -> Dict[str, str]:
    """``conflicts`` of the position method ``name``: every other method, with the reason."""
    return {
        other: (f"{_METHODS[name]} and {what} are two replacements of the token position "
                f"embeddings; a comparison of position methods runs one at a time")
        for other, what in _METHODS.items() if other != name
    }


def placement_settings(prefix: str, method: str) -> Tuple[Setting, ...]:
    """``--<prefix>-sides``, ``--<prefix>-layers``, ``--<prefix>-abs-pos``."""
    return (
        Sides(f"{prefix}_sides", "encoder,decoder", method, "the paper's setting"),
        Layers(f"{prefix}_layers", "all", f"layers with {method}", "every layer, the paper's setting"),
        Choice(f"{prefix}_abs_pos", "drop", ABS_POS,
               help=f"{method}: 'drop' the sinusoidal token position embeddings (the paper, "
                    f"default drop; sets --no-token-positional-embeddings, needs the piece on "
                    f"encoder and decoder) or 'keep' them as well"),
    )


def replace_token_positions(piece_cls, args, prefix: str, method: str) -> None:
    """With ``--<prefix>-abs-pos drop`` turn fairseq's token position embeddings off,
    refusing a placement that leaves one side without the method."""
    if getattr(args, f"{prefix}_abs_pos") != "drop":
        return
    covered = piece_cls.layers_per_side(args)
    if set(covered) != {"encoder", "decoder"} or not all(covered.values()):
        raise PieceConfigError(
            f"--{prefix}-abs-pos drop (the default) removes the token position embeddings of both "
            f"encoder and decoder, so it needs --{prefix}-sides encoder,decoder and at least one "
            f"{prefix} layer on each (got --{prefix}-sides {getattr(args, f'{prefix}_sides')!r}, "
            f"--{prefix}-layers {getattr(args, f'{prefix}_layers')!r}); use --{prefix}-abs-pos "
            f"keep otherwise")
    if not getattr(args, "no_token_positional_embeddings", False):
        logger.info(f"--{prefix}-abs-pos drop: setting --no-token-positional-embeddings "
                    f"({method} in place of the sinusoidal embeddings)")
    args.no_token_positional_embeddings = True
