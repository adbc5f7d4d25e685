"""Localness modelling with a learned Gaussian bias (``localsoft``), Yang, Tu,
Wong, Meng, Chao and Zhang, EMNLP 2018, "Modeling Localness for Self-Attention
Networks"; the "Local_Soft" row (+0.8M) of Table 1 of Yang et al. 2019 (CSAN),
re-implemented as in the CSAN authors' THUMT code (``layers/attention_pos_dyn.py``,
see ``shared/design/csan_table1_baselines.md`` section 1).

Every query i predicts a centre P_i and a window D_i from its projected query
``Qf`` (all heads concatenated, C wide, unscaled, bias included)::

    h      = tanh(W1 Qf_i + b1)               W1: C -> C
    [p; z] = sigmoid(W2 h + b2)               W2: C -> 2H (unit h: p_h, unit H+h: z_h)
    P_i^h  = p_i^h (I - 1),   D_i^h = z_i^h I + 0.1
    e_ij^h = q_i^h . k_j^h / sqrt(d) + G_ij^h,   G_ij^h = -2 (P_i^h - j)^2 / (D_i^h)^2

One softmax over the real keys follows (pad keys are masked). I is the number
of real tokens of the sentence and j the key's position *within* the sentence
(0 = first real token): the authors' code uses the padded index, which assumes
right padding; with fairseq's left padding that would shift the centre by the
pad count, so we count from the first real token (the same on either side).

Defaults and choices the paper leaves open:

* every head is localized with its own P, D (the authors' ``local_heads = 8``);
* the lower 3 encoder layers (``--localsoft-layers 0-2``), decoder untouched;
* no Rel_Pos tables (their ``k = 0``; with k = 16 the count would be 0.9M);
* weights Xavier-uniform, biases zero (fairseq's convention).

Parameters: C*C + C + C*2H + 2H per layer: 270,864 at C = 512, H = 8; the
lower 3 layers: 812,592 (the paper's +0.8M).

Backends: fused and explicit (G is an additive float bias, differentiable
through SDPA). Encoder only: P and D need the whole sentence (I), so the
decoder's incremental decoding is refused (``incremental_ok = False``).
"""

from torch import Tensor

from ..gaussian_localness import (
    QueryPredictor,
    bias_dtype,
    gaussian_bias,
    sentence_lengths_and_positions,
)
from ..piece import AttentionPiece, AttentionSite, Layers, register_piece


@register_piece
class LocalSoft(AttentionPiece):
    """Gaussian bias with a predicted centre and window per query and head (Yang et al. 2018)."""

    name = "localsoft"
    incremental_ok = False
    test_flags = {"localsoft_layers": "0"}
    sides = ("encoder",)
    settings = (
        Layers("localsoft_layers", "0-2", "encoder layers with the learned Gaussian localness bias",
               note="the lower 3 layers"),
    )

    def __init__(self, site: AttentionSite, args=None):
        super().__init__(site)
        C, H = site.num_heads * site.head_dim, site.num_heads
        self.predictor = QueryPredictor(C, C, 2 * H)

    def score_bias(self, q: Tensor, k: Tensor, ctx) -> Tensor:
        H = self.site.num_heads
        y = self.predictor(q).to(bias_dtype(q))  # (B, T, 2H)
        _, pos_k, length = sentence_lengths_and_positions(ctx, bias_dtype(q))
        centre = y[..., :H] * (length - 1)  # (B, T, H)
        width = y[..., H:] * length + 0.1
        return gaussian_bias(centre, width, pos_k).to(q.dtype)  # (B, H, T, S)
