"""Gaussian neighbourhood bias (``neighbor``), Sperber, Niehues, Neubig, Stüker
and Waibel, Interspeech 2018, "Self-Attentional Acoustic Models"; the
"Neighbor" row (+0.4M) of Table 1 of Yang et al. 2019 (CSAN). The CSAN
authors' code has no Neighbor layer; the original is neulab/xnmt
(``specialized_encoders/self_attentional_am.py``, ``diag_gauss_mask``), see
``shared/design/csan_table1_baselines.md`` section 3.

``--neighbor-mode soft`` (default, the original method): one learnable
standard deviation per head, centred on the query itself::

    e_ij^h = q_i^h . k_j^h / sqrt(d) - (i - j)^2 / (2 s_h^2),   s_h = sigma_h^2

with xnmt's ``square_mask_std = True`` (the default of its encoder layer): the
parameter sigma_h is squared to give the std s_h ("to facilitate training");
``--neighbor-std-param plain`` uses s_h = sigma_h. The initial std s_h is
``--neighbor-init-std`` (default 5 positions, Luong's window D = 10 with
sigma = D/2; xnmt leaves it to the user). Parameters: H per layer (8), so
+24 on the lower 3 layers: the paper's +0.4M is NOT reproduced by the
original method.

``--neighbor-mode predicted`` (our count-matching design, not the paper's):
the centre stays at i and the window is predicted per query by the
Local_Hard predictor on the last n_l heads (``--neighbor-heads``, default 4)::

    z_i   = sigmoid(W2 tanh(W1 Qf_i + b1) + b2)        W1: C -> n_l d_h, W2: n_l d_h -> n_l
    D_i^h = z_i^h I + 0.1,    G_ij^h = -2 (i - j)^2 / (D_i^h)^2

with I the sentence length. Parameters 132,356 per layer at C = 512, H = 8,
n_l = 4: 397,068 on the lower 3 layers (+0.4M), and the same speed as
Local_Hard, as Table 1 reports (-0.06 steps/s for both).

i and j are positions within the sentence (0 = first real token), so the bias
is the same for left and right padding. xnmt's hard band
(``diagonal_mask_width``) is not offered.

Defaults: the lower 3 encoder layers (``--neighbor-layers 0-2``); decoder
untouched. Backends: fused and explicit (an additive float bias). Encoder
only; incremental decoding is refused (``incremental_ok = False``; the
predicted mode needs the sentence length).
"""

import math

import torch
from torch import Tensor, nn

from ..gaussian_localness import (
    QueryPredictor,
    bias_dtype,
    clamp_bias,
    gaussian_bias,
    pad_heads,
    sentence_lengths_and_positions,
)
from ..piece import AttentionPiece, AttentionSite, Choice, Float, Int, Layers, register_piece

MODES = ("soft", "predicted")
STD_PARAMS = ("square", "plain")


@register_piece
class Neighbor(AttentionPiece):
    """Gaussian bias centred on the query, learned std per head (Sperber et al. 2018)."""

    name = "neighbor"
    incremental_ok = False
    test_flags = {"neighbor_layers": "0", "neighbor_init_std": 2.0}
    sides = ("encoder",)
    settings = (
        Choice("neighbor_mode", "soft", MODES,
               help="'soft' (learned std per head, the original; default) or "
                    "'predicted' (window predicted per query, matches the +0.4M)"),
        Float("neighbor_init_std", 5.0, positive=True, metavar="S",
              help="soft: initial std of the Gaussian in positions, > 0 (default 5)"),
        Choice("neighbor_std_param", "square", STD_PARAMS, metavar="P",
               help="soft: std = parameter squared ('square', xnmt's default) or "
                    "the parameter itself ('plain')"),
        Int("neighbor_heads", 4, hi="encoder_attention_heads",
            help="predicted: number of localized heads (the last N), "
                 "1..encoder heads (default 4)"),
        Layers("neighbor_layers", "0-2", "encoder layers with the bias", note="the lower 3 layers"),
    )

    def __init__(self, site: AttentionSite, args):
        super().__init__(site)
        self.mode = args.neighbor_mode
        self.square = args.neighbor_std_param == "square"
        self.sigma = None
        self.predictor = None
        if self.mode == "soft":
            s0 = float(args.neighbor_init_std)
            init = math.sqrt(s0) if self.square else s0
            self.sigma = nn.Parameter(torch.full((site.num_heads,), init))
        else:
            n = args.neighbor_heads
            C = site.num_heads * site.head_dim
            self.predictor = QueryPredictor(C, n * site.head_dim, n)

    def std(self) -> Tensor:
        """(H,) the soft mode's standard deviation s_h of each head."""
        return self.sigma.pow(2) if self.square else self.sigma

    def score_bias(self, q: Tensor, k: Tensor, ctx) -> Tensor:
        if self.mode == "soft":
            dist2 = (ctx.q_pos[:, None] - ctx.k_pos[None, :]).to(bias_dtype(q)).pow(2)  # (T, S)
            s = self.std().to(bias_dtype(q))[:, None, None]  # (H, 1, 1)
            return clamp_bias(-dist2[None] / (2 * s.pow(2)))[None].to(q.dtype)  # (1, H, T, S)
        z = self.predictor(q).to(bias_dtype(q))  # (B, T, n)
        pos_q, pos_k, length = sentence_lengths_and_positions(ctx, bias_dtype(q))
        centre = pos_q.to(z.dtype)[..., None].expand_as(z)
        width = z * length + 0.1
        return pad_heads(gaussian_bias(centre, width, pos_k), self.site.num_heads).to(q.dtype)

    def extra_repr(self):
        return f"encoder layer {self.site.layer_idx}, mode={self.mode}"
