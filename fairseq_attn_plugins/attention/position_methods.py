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
from typing import Dict

from .piece import PieceConfigError, parse_layer_spec, parse_sides, require_choice

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


def add_placement_args(parser, prefix: str, method: str) -> None:
    """``--<prefix>-sides``, ``--<prefix>-layers``, ``--<prefix>-abs-pos``."""
    parser.add_argument(f"--{prefix}-sides", type=str, metavar="SIDES",
                        help=f"{method} in self-attention of: 'encoder', 'decoder' or "
                             f"'encoder,decoder' (default)")
    parser.add_argument(f"--{prefix}-layers", type=str, metavar="LAYERS",
                        help=f"{method}: layers (0-based) '0,1', '0-2', 'all' (default all)")
    parser.add_argument(f"--{prefix}-abs-pos", type=str, metavar="MODE",
                        help=f"{method}: 'drop' the sinusoidal token position embeddings (the "
                             f"paper, default; sets --no-token-positional-embeddings, needs the "
                             f"piece on encoder and decoder) or 'keep' them as well")


def placement_defaults(args, prefix: str) -> None:
    for attr, default in (("sides", "encoder,decoder"), ("layers", "all"), ("abs_pos", "drop")):
        setattr(args, f"{prefix}_{attr}", getattr(args, f"{prefix}_{attr}", default))


def validate_placement(args, prefix: str, method: str) -> None:
    """Check sides and layers; with ``abs-pos drop`` turn the token position embeddings off."""
    sides = parse_sides(getattr(args, f"{prefix}_sides"), f"--{prefix}-sides")
    layers = getattr(args, f"{prefix}_layers")
    covered = {side: parse_layer_spec(layers, getattr(args, f"{side}_layers"), f"--{prefix}-layers")
               for side in sides}
    if require_choice(args, f"{prefix}_abs_pos", ABS_POS) != "drop":
        return
    if set(sides) != {"encoder", "decoder"} or not all(covered.values()):
        raise PieceConfigError(
            f"--{prefix}-abs-pos drop (the default) removes the token position embeddings of both "
            f"encoder and decoder, so it needs --{prefix}-sides encoder,decoder and at least one "
            f"{prefix} layer on each (got --{prefix}-sides {getattr(args, f'{prefix}_sides')!r}, "
            f"--{prefix}-layers {layers!r}); use --{prefix}-abs-pos keep otherwise")
    if not getattr(args, "no_token_positional_embeddings", False):
        logger.info(f"--{prefix}-abs-pos drop: setting --no-token-positional-embeddings "
                    f"({method} replaces the sinusoidal embeddings)")
    args.no_token_positional_embeddings = True
