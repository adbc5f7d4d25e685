"""Learnable temperature (``temp``), Dufter, Schmitt & Schütze, COLING 2020,
"Increasing Learning Efficiency of Self-Attention Networks through Direct
Position Interactions, Learnable Temperature, and Convoluted Attention"
(aclanthology 2020.coling-main.324; authors' code: pdufter/convatt).

Every head h gets three learnable scalars that rescale its query, key and
value projections::

    q^h = tau_Q^h (x W_Q^h),  k^h = tau_K^h (x W_K^h),  v^h = tau_V^h (x W_V^h)
    o^h = softmax(q^h k^h^T / sqrt(d)) v^h

so tau_Q * tau_K acts as a learnable (inverse) softmax temperature and tau_V
scales the head's output. All scalars are initialised to 1 (then the layer is
exactly the baseline). Verified in the authors' code (models/selfattention.py,
option ``weight_normalization``): tau_Q, tau_K, tau_V are ``Ones``-initialised
weights multiplied onto X W_Q, X W_K, X W_V before the 1/sqrt(d) scaling; there
every head is its own layer, so "per head" here matches one scalar per
(head, projection). fairseq's projections carry a bias, which is scaled with
the projection (tau * (x W + b)).

Flags: ``--temp-layers`` (0-based layer list, default ``all``; the authors
apply it in every layer) and ``--temp-sides`` (``encoder``, ``decoder`` or
``both``, default ``encoder``: the paper's models are encoders only; the
decoder side is causal-safe and supports incremental decoding).

Backends: fused and explicit (the hook only rescales q, k, v).
"""

import torch
from torch import Tensor, nn

from ..piece import AttentionPiece, AttentionSite, Layers, Sides, register_piece


@register_piece
class LearnableTemperature(AttentionPiece):
    """Per-head learnable scalars on W_q, W_k, W_v (Dufter et al. 2020). See module docstring."""

    name = "temp"
    test_flags = {"temp_layers": "0", "temp_sides": "both"}
    settings = (
        Layers("temp_layers", "all", "layers with learnable temperature"),
        Sides("temp_sides", "encoder", "learnable temperature"),
    )

    def __init__(self, site: AttentionSite, args=None):
        super().__init__(site)
        H = site.num_heads
        self.tau_q = nn.Parameter(torch.ones(H))
        self.tau_k = nn.Parameter(torch.ones(H))
        self.tau_v = nn.Parameter(torch.ones(H))

    def transform_qkv(self, q: Tensor, k: Tensor, v: Tensor, ctx):
        # (B, H, T|S, D) * (1, H, 1, 1)
        def per_head(t):
            return t.to(q.dtype)[None, :, None, None]

        return q * per_head(self.tau_q), k * per_head(self.tau_k), v * per_head(self.tau_v)

    def extra_repr(self):
        return f"{self.site.side} layer {self.site.layer_idx}, heads={self.site.num_heads}"
