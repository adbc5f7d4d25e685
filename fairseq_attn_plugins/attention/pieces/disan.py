"""Directional self-attention (``disan``), Shen, Zhou, Long, Jiang, Pan and
Zhang, AAAI 2018, "DiSAN: Directional Self-Attention Network for RNN/CNN-Free
Language Understanding" (arXiv:1709.04696); the multi-head split is the
``Bi_Direct`` locality baseline of Yang et al. 2019 (CSAN paper, Table 1).

Each head h gets a positional mask M^h added to the scores (-inf = blocked)::

    o_i^h = sum_j softmax_j(q_i^h . k_j^h / sqrt(d) + M^h_ij) v_j^h

    forward  (fw):   M_ij = 0 if j < i  else -inf   (key earlier than query)
    backward (bw):   M_ij = 0 if j > i  else -inf   (key later than query)
    no-diagonal:     M_ij = 0 if j != i else -inf   (everything but itself)
    all:             M_ij = 0                        (unmasked head)

``--disan-diagonal disable`` (default, as DiSAN) excludes j = i from the fw/bw
masks; ``keep`` allows it (j <= i / j >= i).

Heads (``--disan-directions``): ``bi`` (default, Bi_Direct) gives the first
ceil(H/2) heads the forward mask and the others the backward mask; or a count
list such as ``fw:4,bw:4`` or ``fw:2,bw:2,nodiag:2,all:2`` (heads in that order,
counts summing to the number of heads), or one name per head
(``fw,bw,fw,bw``). A single name (``fw``) applies to every head.

Sides and layers: ``--disan-sides`` (default ``encoder``) and
``--disan-layers`` (default ``0-2``, the lower three layers, the setting of the
CSAN paper's locality comparison). In the decoder the causal mask already hides
later keys, so backward heads would see nothing: decoder-side DiSAN accepts
only fw / nodiag / all heads and is refused with a message otherwise.

A query with no allowed key (the first token of a forward head with the
diagonal disabled, the last of a backward head) outputs zeros, never NaN (the
core's rule for empty rows; DiSAN's masked softmax gives the same). No new
parameters.

Not included: DiSAN's multi-dimensional (feature-wise) token2token attention
and its fusion gate; this piece is the directional masking inside the
Transformer's multi-head dot-product attention (the Bi_Direct baseline).

Backends: a boolean ``allowed_mask`` (1, H, T, S): fused and explicit paths.
"""

from typing import List, Optional

import torch
from torch import Tensor

from ..piece import (
    AttentionPiece,
    AttentionSite,
    PieceConfigError,
    covers_site,
    parse_layer_spec,
    parse_sides,
    register_piece,
    require_choice,
)

DIRECTIONS = ("fw", "bw", "nodiag", "all")
DIAGONAL = ("disable", "keep")


def parse_directions(spec, num_heads: int, flag: str = "--disan-directions") -> List[str]:
    """Per-head direction names for ``num_heads`` heads; raises naming ``flag``."""
    text = str(spec).strip().lower()
    allowed = (f"'bi', one of {list(DIRECTIONS)}, counts such as 'fw:4,bw:4' summing to "
               f"{num_heads}, or {num_heads} comma-separated names")
    if text == "bi":
        n_fw = (num_heads + 1) // 2
        return ["fw"] * n_fw + ["bw"] * (num_heads - n_fw)
    if text in DIRECTIONS:
        return [text] * num_heads
    heads: List[str] = []
    for part in text.split(","):
        name, _, count = part.strip().partition(":")
        name = name.strip()
        if name not in DIRECTIONS:
            raise PieceConfigError(f"{flag}: unknown direction {name!r} in {spec!r}; expected {allowed}")
        try:
            n = int(count) if count else 1
        except ValueError:
            n = -1
        if n < 1:
            raise PieceConfigError(f"{flag}: bad head count in {part!r}; expected {allowed}")
        heads += [name] * n
    if len(heads) != num_heads:
        raise PieceConfigError(
            f"{flag}: {spec!r} gives {len(heads)} heads, the model has {num_heads}; expected {allowed}"
        )
    return heads


def direction_mask(direction: str, q_pos: Tensor, k_pos: Tensor, keep_diagonal: bool) -> Tensor:
    """(T, S) bool, True = the key may be attended to."""
    diff = k_pos[None, :] - q_pos[:, None]  # j - i
    if direction == "fw":
        return diff <= 0 if keep_diagonal else diff < 0
    if direction == "bw":
        return diff >= 0 if keep_diagonal else diff > 0
    if direction == "nodiag":
        return diff != 0
    return torch.ones_like(diff, dtype=torch.bool)


@register_piece
class DirectionalSelfAttention(AttentionPiece):
    """DiSAN directional masks / Bi_Direct heads (Shen et al. 2018). See module docstring."""

    name = "disan"
    conflicts = {}
    test_flags = {"disan_layers": "0"}

    @classmethod
    def add_args(cls, parser):
        parser.add_argument("--disan-directions", type=str, metavar="SPEC",
                            help="DiSAN per-head masks: 'bi' (half forward, half backward; "
                                 "default), one of fw/bw/nodiag/all for every head, counts "
                                 "'fw:4,bw:4' in head order, or one name per head")
        parser.add_argument("--disan-diagonal", type=str, metavar="MODE",
                            help="DiSAN forward/backward masks: 'disable' the query's own "
                                 "position (paper, default) or 'keep' it")
        parser.add_argument("--disan-sides", type=str, metavar="SIDES",
                            help="DiSAN in self-attention of: 'encoder' (default), 'decoder' or "
                                 "'encoder,decoder' (decoder: fw/nodiag/all heads only)")
        parser.add_argument("--disan-layers", type=str, metavar="LAYERS",
                            help="DiSAN: layers (0-based) '0,1,2', '0-2', 'all' (default 0-2)")

    @classmethod
    def set_defaults(cls, args):
        args.disan_directions = getattr(args, "disan_directions", "bi")
        args.disan_diagonal = getattr(args, "disan_diagonal", "disable")
        args.disan_sides = getattr(args, "disan_sides", "encoder")
        args.disan_layers = getattr(args, "disan_layers", "0-2")

    @classmethod
    def validate(cls, args):
        require_choice(args, "disan_diagonal", DIAGONAL)
        for side in parse_sides(args.disan_sides, "--disan-sides"):
            heads = parse_directions(args.disan_directions, getattr(args, f"{side}_attention_heads"))
            if side == "decoder" and "bw" in heads:
                raise PieceConfigError(
                    f"--disan-directions {args.disan_directions!r} has backward heads, but "
                    "--disan-sides includes the decoder, whose causal mask leaves backward heads "
                    "no keys: use --disan-sides encoder, or only fw/nodiag/all heads"
                )
            parse_layer_spec(args.disan_layers, getattr(args, f"{side}_layers"), "--disan-layers")

    @classmethod
    def build(cls, args, site: AttentionSite):
        if not covers_site(args, "disan", site):
            return None
        return cls(site, parse_directions(args.disan_directions, site.num_heads),
                   args.disan_diagonal == "keep")

    def __init__(self, site: AttentionSite, directions: List[str], keep_diagonal: bool = False):
        super().__init__(site)
        if len(directions) != site.num_heads:
            raise PieceConfigError(f"--disan-directions: {len(directions)} heads given, "
                                   f"the model has {site.num_heads}")
        if site.side == "decoder" and "bw" in directions:
            raise PieceConfigError("--disan-directions: backward heads are not allowed in the decoder")
        self.directions = list(directions)
        self.keep_diagonal = keep_diagonal

    def allowed_mask(self, ctx) -> Optional[Tensor]:
        if all(d == "all" for d in self.directions):
            return None
        masks = [direction_mask(d, ctx.q_pos, ctx.k_pos, self.keep_diagonal) for d in self.directions]
        return torch.stack(masks)[None]  # (1, H, T, S)

    def extra_repr(self):
        return (f"directions={','.join(self.directions)}, keep_diagonal={self.keep_diagonal}, "
                f"{self.site.side} layer {self.site.layer_idx}")
