"""Attention with linear biases (``alibi``), Press, Smith and Lewis, ICLR 2022,
"Train Short, Test Long: Attention with Linear Biases Enables Input Length
Extrapolation" (arXiv:2108.12409).

A fixed, head-specific penalty proportional to the query-key distance is added
to the scaled scores; there are no parameters and no position embeddings::

    e_ij^h = q_i^h . k_j^h / sqrt(d) - m_h |i - j|

Slopes (the paper's section 3 and its reference ``get_slopes``): for H heads a
power of two, the geometric sequence ``m_h = 2^(-8 h / H)``, h = 1..H (8 heads:
1/2, 1/4, ..., 1/256). Otherwise, with n the largest power of two below H: the
n slopes of n heads, then every other slope of 2n heads, ``[0::2]``, for the
H - n remaining heads (e.g. 12 heads: 2^-1..2^-8 then 2^-0.5, 2^-1.5, 2^-2.5,
2^-3.5).

Decoder (the paper's causal setting): the future is masked, so the bias on the
allowed keys is ``-m_h (i - j)``, j <= i, the paper's formula. Encoder: the
paper defines ALiBi for causal language models only; we follow the symmetric
adaptation ``-m_h |i - j|`` with the same slopes (both directions penalised
alike), as MosaicBERT (Portes et al. 2023) adapts it for bidirectional
encoders. Asymmetric variants (different slopes to the left and right) are not
offered.

i and j are key indices of the padded batch; only their difference enters, so
left or right padding gives the same output. Incremental decoding: distances
come from ``q_pos``/``k_pos``, exact.

Placement: ``--alibi-sides`` (default encoder,decoder), ``--alibi-layers``
(default all), every self-attention layer as in the paper; ``--alibi-abs-pos
drop`` (default) turns fairseq's sinusoidal token position embeddings off (the
paper has none); see :mod:`..position_method_flags`. With 2D-CSAN's widened keys,
each slot carries the penalty of its key's distance with the query head's slope.

Backends: the piece declares its slopes as data (:meth:`ALiBi.distance_terms`). A float
score bias (1, H, T, S) on the fused SDPA path (and the explicit path). On CUDA, when ALiBi
is the layer's only piece and attention dropout is 0, ``--attn-backend auto`` computes the
penalty inside a flex_attention ``score_mod`` (:mod:`..backends.distance.flex_forms`): no bias
tensor in memory; ``--attn-backend flex`` forces that path on any device. On CUDA ``auto``
takes it for inference only (its compiled backward is unproven there: benchmarks/RESULTS.md).
On CPU, ``auto`` runs an encoder self-attention from the policy's ``distance_bias_min_len``
(128) positions on the distance-bias path (:mod:`..backends.distance.bias_path`), whose backward
keeps the far keys' negligible probabilities out of subnormal arithmetic. The penalty is
computed in float32 for fp16/bf16/fp32 models, in float64 for a float64 one, on every path.
``--attn-backend triton`` runs the slopes' penalty through the Triton flash kernels
(:mod:`..backends.distance.triton_path`; CUDA, attention dropout 0, the piece alone in its layer),
encoder and decoder self-attention (fairseq's future mask read as the causal flag); ``--attn-backend
tuned`` times it beside the other paths and keeps the fastest per shape class.
"""

import math
from typing import List

from torch import Tensor

from ..backends.distance import DistanceTerms
from ..piece import AttentionPiece, AttentionSite, register_piece
from ..position_method_flags import placement_settings, position_conflicts, replace_token_positions


def alibi_slopes(num_heads: int) -> List[float]:
    """The paper's head slopes (geometric; the rule for a head count not a power of two)."""
    def power_of_two(n):
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    n = 2 ** int(math.floor(math.log2(num_heads)))
    if n == num_heads:
        return power_of_two(n)
    return power_of_two(n) + alibi_slopes(2 * n)[0::2][: num_heads - n]


@register_piece
class ALiBi(AttentionPiece):
    """ALiBi (Press et al. 2022): -slope_h * |i - j| added to the scores. See module docstring."""

    name = "alibi"
    conflicts = position_conflicts("alibi")
    test_flags = {"alibi_layers": "0"}

    settings = placement_settings("alibi", "ALiBi")

    @classmethod
    def check_combination(cls, args):
        replace_token_positions(cls, args, "alibi", "ALiBi")

    @classmethod
    def from_args(cls, site: AttentionSite, args):
        return cls(site)

    def __init__(self, site: AttentionSite):
        super().__init__(site)
        self.slopes = alibi_slopes(site.num_heads)

    def distance_terms(self) -> DistanceTerms:
        """The fixed slopes: ``-m_h |j - i|`` (the encoder's symmetric form; the decoder's
        future mask leaves the paper's ``-m_h (i - j)`` on the allowed keys)."""
        return DistanceTerms(slopes=tuple(self.slopes))

    def score_bias(self, q: Tensor, k: Tensor, ctx) -> Tensor:
        """``-m_h |i - j|`` as (1, H, T, S)."""
        return self.distance_terms().score_bias(q, ctx.q_pos, ctx.k_pos, 1.0)

    def extra_repr(self):
        return f"slopes={[round(m, 4) for m in self.slopes]}, {self.site.side} layer {self.site.layer_idx}"
