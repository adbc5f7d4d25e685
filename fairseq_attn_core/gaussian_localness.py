"""Shared parts of the Gaussian localness pieces (``localsoft``, ``localhard``,
``neighbor``): the per-query predictor of Yang et al. (2018) and the Gaussian
score bias. Not a piece itself (pieces live in ``pieces/``).

Predictor (the CSAN authors' THUMT code, ``layers/attention_pos_dyn.py`` and
``layers/attention_local.py``)::

    h = tanh(W1 Qf + b1)          W1: C -> hidden
    y = sigmoid(W2 h + b2)        W2: hidden -> outputs

where ``Qf`` is the projected query of all heads concatenated (C wide, bias
included, *before* the 1/sqrt(d) scaling). Weights are Xavier-uniform and
biases zero, as fairseq initialises its projections (THUMT's Glorot scope
also covers biases; a zero start is our choice).

Gaussian bias, added to the logits after the scaling::

    G_ij = -2 (P_i - j)^2 / D_i^2        (sigma_i = D_i / 2)

with j the key's position *within its sentence* (0 = first real token), so
left and right padding give the same bias. The bias is floored at -1e4
(``BIAS_FLOOR``: exp(-1e4) = 0 in every dtype; it keeps fp16 finite).
"""

import torch
from torch import Tensor, nn

from .piece import AttentionContext
from .sentence_positions import sentence_positions


class QueryPredictor(nn.Module):
    """y = sigmoid(W2 tanh(W1 Qf + b1) + b2): (B, H, T, D) query -> (B, T, outputs)."""

    def __init__(self, embed_dim: int, hidden: int, outputs: int):
        super().__init__()
        self.hidden = nn.Linear(embed_dim, hidden)
        self.out = nn.Linear(hidden, outputs)
        for lin in (self.hidden, self.out):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, q: Tensor) -> Tensor:
        B, H, T, D = q.shape
        qf = q.permute(0, 2, 1, 3).reshape(B, T, H * D)  # (B, T, C)
        w = self.hidden.weight
        return torch.sigmoid(self.out(torch.tanh(self.hidden(qf.to(w.dtype))))).to(q.dtype)


def gaussian_bias(centre: Tensor, width: Tensor, pos_k: Tensor) -> Tensor:
    """-2 (centre - j)^2 / width^2.

    centre, width: (B|1, T, n) per query and localized head; pos_k (B|1, S).
    Returns (B|1, n, T, S)."""
    diff = centre.transpose(1, 2)[..., None] - pos_k[:, None, None, :].to(centre.dtype)
    return clamp_bias(-2.0 * diff.pow(2) / width.transpose(1, 2)[..., None].pow(2))


#: the lowest Gaussian bias: exp(-1e4) is 0 in every dtype, and -1e4 stays finite in
#: fp16 (a window of 0.1 over a long sentence would otherwise overflow to -inf)
BIAS_FLOOR = -1e4


def clamp_bias(bias: Tensor) -> Tensor:
    return bias.clamp(min=BIAS_FLOOR)


def bias_dtype(q: Tensor) -> torch.dtype:
    """Biases are computed in float32 at least (float64 stays float64)."""
    return torch.promote_types(q.dtype, torch.float32)


def sentence_lengths_and_positions(ctx: AttentionContext, dtype: torch.dtype = torch.float32):
    """(pos_q (B|1, T), pos_k (B|1, S), lengths (B|1, 1, 1) of ``dtype``): positions within
    the sentence and the number I of real keys of each sentence."""
    pos_q, pos_k, lengths = sentence_positions(ctx)
    return pos_q, pos_k, lengths.to(dtype)[:, None, None]


def pad_heads(bias: Tensor, num_heads: int) -> Tensor:
    """Put a (B, n, T, S) bias on the LAST n of ``num_heads`` heads, zero on the others
    (the authors' Local_Hard layout)."""
    n = bias.size(1)
    if n == num_heads:
        return bias
    zeros = bias.new_zeros(bias.size(0), num_heads - n, bias.size(2), bias.size(3))
    return torch.cat([zeros, bias], dim=1)

