"""Local attention with a predicted centre and a fixed window (``localhard``),
after Luong, Pham and Manning, EMNLP 2015, "Effective Approaches to
Attention-based Neural Machine Translation" (local-p); the "Local_Hard" row
(+0.4M) of Table 1 of Yang et al. 2019 (CSAN), as in the CSAN authors' THUMT
code ``layers/attention_local.py`` (``shared/design/csan_table1_baselines.md``
section 2).

The last n_l heads each predict a centre from the projected query ``Qf`` (all
heads concatenated, C wide, unscaled); the window D is fixed::

    h      = tanh(W1 Qf_i + b1)          W1: C -> n_l * d_h
    p_i    = sigmoid(W2 h + b2)          W2: n_l * d_h -> n_l
    P_i^h  = p_i^h (I - 1)
    e_ij^h = q_i^h . k_j^h / sqrt(d) + G_ij^h,   G_ij^h = -2 (P_i^h - j)^2 / D^2

The first H - n_l heads get no bias. I is the number of real tokens and j the
key's position within the sentence (0 = first real token), so either padding
side gives the same bias (the authors' code uses the padded index).

Departures from Luong's local-p (the authors' code, kept): G is added to the
logits before ONE softmax (Luong multiplies the normalised alignment by the
Gaussian), there is no hard truncation to [P - D, P + D], and P uses I - 1.

Defaults and choices the paper leaves open:

* ``--localhard-heads`` n_l = 4 (1..H): the value that reproduces +0.4M
  (n_l = 8 would be 0.80M);
* ``--localhard-window`` D = 10 (the authors' ``local_size``, Luong's D;
  sigma = D / 2 = 5), a number > 0;
* the lower 3 encoder layers (``--localhard-layers 0-2``);
* weights Xavier-uniform, biases zero.

Parameters: C n_l d_h + n_l d_h + n_l d_h n_l + n_l per layer: 132,356 at
C = 512, H = 8, n_l = 4; lower 3 layers: 397,068 (the paper's +0.4M).

Backends: fused and explicit (an additive float bias). Encoder only: P needs
the sentence length, so incremental decoding is refused (``incremental_ok = False``).
"""

import torch
from torch import Tensor

from ..gaussian_localness import (
    QueryPredictor,
    bias_dtype,
    gaussian_bias,
    pad_heads,
    sentence_lengths_and_positions,
)
from ..piece import AttentionPiece, AttentionSite, Float, Int, Layers, register_piece


@register_piece
class LocalHard(AttentionPiece):
    """Gaussian bias, predicted centre, fixed window, on the last n_l heads (Luong-style)."""

    name = "localhard"
    incremental_ok = False
    test_flags = {"localhard_layers": "0", "localhard_heads": 2, "localhard_window": 4.0}
    sides = ("encoder",)
    settings = (
        Int("localhard_heads", 4, hi="encoder_attention_heads",
            help="number n_l of localized heads (the last n_l), 1..encoder heads "
                 "(default 4)"),
        Float("localhard_window", 10.0, positive=True, metavar="D",
              help="fixed window D of the Gaussian (sigma = D/2), a number > 0 "
                   "(default 10)"),
        Layers("localhard_layers", "0-2", "encoder layers with the local bias",
               note="the lower 3 layers"),
    )

    def __init__(self, site: AttentionSite, args):
        super().__init__(site)
        self.heads = args.localhard_heads
        self.window = float(args.localhard_window)
        C = site.num_heads * site.head_dim
        self.predictor = QueryPredictor(C, self.heads * site.head_dim, self.heads)

    def score_bias(self, q: Tensor, k: Tensor, ctx) -> Tensor:
        p = self.predictor(q).to(bias_dtype(q))  # (B, T, n_l)
        _, pos_k, length = sentence_lengths_and_positions(ctx, bias_dtype(q))
        centre = p * (length - 1)
        width = torch.full_like(centre, self.window)
        bias = gaussian_bias(centre, width, pos_k)  # (B, n_l, T, S)
        return pad_heads(bias, self.site.num_heads).to(q.dtype)

    def extra_repr(self):
        return f"encoder layer {self.site.layer_idx}, heads={self.heads}, window={self.window}"
