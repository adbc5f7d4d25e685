"""Directional self-attention (``disan``): Shen, Zhou, Long, Jiang, Pan and
Zhang, AAAI 2018, "DiSAN: Directional Self-Attention Network for RNN/CNN-Free
Language Understanding" (arXiv:1709.04696), and the ``Bi_Direct`` locality
baseline of Yang et al. 2019 (CSAN paper, Table 1) as the CSAN authors wrote it
(baosongyang/Context-Aware-SAN ``layers/attention_di.py``).

Each head h gets a positional mask M^h added to the scores (-inf = blocked)::

    o_i^h = sum_j softmax_j(q_i^h . k_j^h / sqrt(d) + M^h_ij) v_j^h

    forward  (fw):   M_ij = 0 if j < i  else -inf   (key earlier than query)
    backward (bw):   M_ij = 0 if j > i  else -inf   (key later than query)
    no-diagonal:     M_ij = 0 if j != i else -inf   (everything but itself)
    all:             M_ij = 0                        (unmasked head)

``--disan-diagonal`` for the fw/bw masks: ``disable`` excludes j = i (DiSAN),
``keep`` allows it (j <= i / j >= i), ``auto`` (default) keeps it for the
``bidirect`` layout (as attention_di.py) and disables it for the others.

Heads (``--disan-directions``):

* ``bidirect`` / ``bidirect:N``: the authors' Bi_Direct (attention_di.py,
  ``multiplicative_attention(..., num_heads - 2 * di_heads, di_heads)``): the
  first H - 2N heads unmasked, the remaining 2N alternating fw, bw, fw, bw
  (``tile(concat([forward, backward]), [1, di_heads, 1, 1])``), diagonal
  included (``matrix_band_part(ones, -1, 0)``). The code has no config value
  for N (``di_heads`` defaults to 0); the spec
  (shared/design/csan_table1_baselines.md §6) infers N = 2 for 8 heads
  (4 unmasked + 2 fw + 2 bw) from the authors' commented-out code, so plain
  ``bidirect`` takes N = H / 4, half the heads directional (N = 4 for the big
  model's 16 heads: a decision, the paper reports base only). The authors add
  -1e9 instead of -inf; a row left without keys (with left padding, a pad
  query of a forward head sees only pads) outputs zeros here, never NaN.
* DiSAN's own masks: ``bi`` (default of the piece: the first ceil(H/2) heads
  forward, the others backward, diagonal disabled); a count list such as
  ``fw:4,bw:4`` or ``fw:2,bw:2,nodiag:2,all:2`` (heads in that order, counts
  summing to the number of heads); one name per head (``fw,bw,fw,bw``); a
  single name (``fw``) for every head.

Architectures: ``transformer_bidirect_wmt_en_de`` /
``transformer_bidirect_vaswani_wmt_en_de_big`` are Bi_Direct (``bidirect``,
lower 3 encoder layers: the spec states no layers for it and the CSAN paper
applies every locality model of Table 1 to the lowest three encoder layers);
``transformer_disan_*`` keep DiSAN's ``bi`` masks.

Sides and layers: ``--disan-sides`` (default ``encoder``) and
``--disan-layers`` (default ``0-2``, the lower three layers). In the decoder the
causal mask already hides later keys, so backward heads would see nothing:
decoder-side DiSAN accepts only fw / nodiag / all heads and is refused with a
message otherwise.

A query with no allowed key (the first token of a forward head with the
diagonal disabled, the last of a backward head) outputs zeros, never NaN (the
core's rule for empty rows; DiSAN's masked softmax gives the same). No new
parameters.

Not included: DiSAN's multi-dimensional (feature-wise) token2token attention
and its fusion gate; this piece is the directional masking inside the
Transformer's multi-head dot-product attention.

Backends: a boolean ``allowed_mask`` (1, H, T, S): fused and explicit paths.
"""

from typing import List, Optional

import torch
from torch import Tensor

from ..piece import (
    AttentionPiece,
    AttentionSite,
    Choice,
    Layers,
    PieceConfigError,
    Sides,
    Text,
    register_piece,
)

DIRECTIONS = ("fw", "bw", "nodiag", "all")
DIAGONAL = ("auto", "disable", "keep")


def bidirect_layout(spec: str, num_heads: int, flag: str) -> List[str]:
    """``bidirect[:N]``: H - 2N unmasked heads, then N times (fw, bw)."""
    _, _, count = spec.partition(":")
    n = num_heads // 4
    if count:
        try:
            n = int(count)
        except ValueError:
            n = -1
    if n < 1 or 2 * n > num_heads:
        raise PieceConfigError(
            f"{flag}: {spec!r} needs N directional pairs with 1 <= N <= {num_heads // 2} "
            f"({num_heads} heads; plain 'bidirect' takes N = heads/4 = {num_heads // 4})"
        )
    return ["all"] * (num_heads - 2 * n) + ["fw", "bw"] * n


def keeps_diagonal(args) -> bool:
    """``--disan-diagonal``: auto = keep for the bidirect layout, disable for DiSAN's masks."""
    if args.disan_diagonal == "auto":
        return str(args.disan_directions).strip().lower().startswith("bidirect")
    return args.disan_diagonal == "keep"


def parse_directions(spec, num_heads: int, flag: str = "--disan-directions") -> List[str]:
    """Per-head direction names for ``num_heads`` heads; raises naming ``flag``."""
    text = str(spec).strip().lower()
    allowed = (f"'bidirect[:N]', 'bi', one of {list(DIRECTIONS)}, counts such as 'fw:4,bw:4' "
               f"summing to {num_heads}, or {num_heads} comma-separated names")
    if text.startswith("bidirect"):
        return bidirect_layout(text, num_heads, flag)
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
    test_flags = {"disan_layers": "0"}
    settings = (
        Text("disan_directions", "bi",
             help="DiSAN per-head masks: 'bidirect[:N]' (the CSAN authors' "
                  "Bi_Direct: H-2N unmasked heads, then N x fw,bw; N = H/4 by "
                  "default), 'bi' (DiSAN: half forward, half backward; default), "
                  "one of fw/bw/nodiag/all for every head, counts 'fw:4,bw:4' in "
                  "head order, or one name per head"),
        Choice("disan_diagonal", "auto", DIAGONAL,
               help="forward/backward masks: 'keep' the query's own position, "
                    "'disable' it (DiSAN) or 'auto' (default: keep for bidirect, "
                    "disable otherwise)"),
        Sides("disan_sides", "encoder", "DiSAN", note="decoder: fw/nodiag/all heads only"),
        Layers("disan_layers", "0-2", "layers with DiSAN masks", note="the lower 3 layers"),
    )
    # the CSAN authors' Bi_Direct heads (diagonal included through --disan-diagonal auto)
    architectures = {"bidirect": {"disan_directions": "bidirect"}}

    @classmethod
    def check_combination(cls, args):
        for side in cls.covered_sides(args):
            heads = parse_directions(args.disan_directions, getattr(args, f"{side}_attention_heads"))
            if side == "decoder" and "bw" in heads:
                raise PieceConfigError(
                    f"--disan-directions {args.disan_directions!r} has backward heads, but "
                    "--disan-sides includes the decoder, whose causal mask leaves backward heads "
                    "no keys: use --disan-sides encoder, or only fw/nodiag/all heads"
                )

    @classmethod
    def from_args(cls, site: AttentionSite, args):
        return cls(site, parse_directions(args.disan_directions, site.num_heads), keeps_diagonal(args))

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
