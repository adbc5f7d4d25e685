"""Convolutional self-attention networks (CSAN), Yang et al., NAACL 2019,
"Convolutional Self-Attention Networks" (arXiv:1904.03107).

1D-CSAN (``csan1d``)
    Query i of head h attends only to the keys of its own head inside a window
    of M+1 positions centred on i:  j in [i - M/2, i + M/2], cut short at the
    sequence ends and at padding.  Default M+1 = 11.  Formula:
    ``o_i^h = sum_{j in W(i)} softmax_j(q_i^h . k_j^h / sqrt(d)) v_j^h``.

2D-CSAN (``csan2d``)
    The window also spans N+1 adjacent heads (default N+1 = 3: h-1, h, h+1).
    The query of head h scores the keys of every head in its area directly (no
    new projection); ONE softmax runs over the union ((N+1) x (M+1) entries)
    and the weights multiply the matching values of those heads:
    ``o_i^h = sum_{h' in A(h)} sum_{j in W(i)} softmax(q_i^h . k_j^{h'} / sqrt(d)) v_j^{h'}``.

    Heads at the edges (``--csan-head-edge``):

    * ``cut`` (default): the area is cut short at the first/last head, like the
      window at the sequence ends; head 0 sees heads {0, 1}.
    * ``wrap``: heads are circular for keys and values (head 0 sees H-1, 0, 1).
    * ``authors``: exactly the authors' THUMT code
      (baosongyang/Context-Aware-SAN, layers/attention_conv.py): keys wrap
      around, values are clamped, so head 0 scores the keys of head H-1 but
      weights its *own* values in that slot.

Both apply to the lower 3 encoder layers by default (``--csan-layers 0-2``);
the decoder is unchanged. No new parameters (the paper's "+0.0M").

Backends: both run on the fused path (scaled_dot_product_attention with a
boolean mask; 2D-CSAN widens the key axis with the neighbouring heads' keys
and values) and on the explicit path. Long sequences: both take the block-local
SDPA path (fairseq_attn_core/backends/local.py) from 256 positions (the policy's ``local_min_len``; 2D-CSAN: each query
block over the window of every head of its area, side by side, one softmax; its
blocks recomputed in the backward); on CUDA, inference from 512 positions
(the policy's ``flex_band_min_len``) takes block-sparse flex_attention instead
(fairseq_attn_core/backends/flex.py: blocks outside the window are skipped);
``--attn-backend flex`` forces the latter at any length (exactness tests).
"""

from typing import Optional

import torch
from torch import Tensor

from ..piece import (
    AttentionPiece,
    Choice,
    Int,
    Layers,
    PieceConfigError,
    positions_window,
    register_piece,
)

HEAD_EDGES = ("cut", "wrap", "authors")
WINDOW = Int("csan_window", 11, odd=True, metavar="M1",
             help="CSAN window size M+1 in positions, odd, >= 1 (default 11)")
LAYERS = Layers("csan_layers", "0-2", "encoder layers with CSAN", note="the lower 3 layers")
HEADS = Int("csan_heads", 3, hi="encoder_attention_heads", odd=True, metavar="N1",
            help="2D-CSAN: number N+1 of adjacent heads in the area, odd, "
                 "1..encoder heads (default 3)")
HEAD_EDGE = Choice("csan_head_edge", "cut", HEAD_EDGES,
                   help="2D-CSAN at the first/last head: 'cut' (area cut short, default), "
                        "'wrap' (circular keys and values) or 'authors' (keys wrap, "
                        "values clamp, as in the authors' code)")
ONE_CSAN = "2D-CSAN already contains the 1D window; pick one of csan1d/csan2d"


class _CSANBase(AttentionPiece):
    sides = ("encoder",)
    test_flags = {"csan_layers": "0", "csan_window": 3}

    def __init__(self, site, args):
        super().__init__(site)
        self.window = args.csan_window
        self.half = self.window // 2
        self.band_half = self.half  # keys only within half positions: block-local path

    def allowed_mask(self, ctx) -> Optional[Tensor]:
        return positions_window(ctx.q_pos, ctx.k_pos, self.half)  # (T, S)


@register_piece
class CSAN1D(_CSANBase):
    """1D convolutional self-attention (Yang et al. 2019). See module docstring."""

    name = "csan1d"
    conflicts = {"csan2d": ONE_CSAN}
    settings = (WINDOW, LAYERS)
    unused_settings = (HEADS, HEAD_EDGE)

    def extra_repr(self):
        return f"window={self.window}, layer={self.site.layer_idx}"


@register_piece
class CSAN2D(_CSANBase):
    """2D convolutional self-attention (Yang et al. 2019). See module docstring."""

    name = "csan2d"
    expands_kv = True
    conflicts = {"csan1d": ONE_CSAN}
    settings = (WINDOW, LAYERS, HEADS, HEAD_EDGE)

    def __init__(self, site, args):
        super().__init__(site, args)
        H, n = site.num_heads, args.csan_heads
        if n > H:
            raise PieceConfigError(f"--csan-heads must be <= {H} heads (got {n})")
        self.area = n
        self.head_edge = args.csan_head_edge
        offsets = torch.arange(n) - n // 2  # (n,)
        raw = torch.arange(H)[:, None] + offsets[None, :]  # (H, n)
        wrapped = raw % H
        clamped = raw.clamp(0, H - 1)
        valid = (raw >= 0) & (raw < H)
        if self.head_edge == "cut":
            k_idx, v_idx = clamped, clamped  # invalid slots are masked out
        elif self.head_edge == "wrap":
            k_idx, v_idx, valid = wrapped, wrapped, torch.ones_like(valid)
        else:  # authors
            k_idx, v_idx, valid = wrapped, clamped, torch.ones_like(valid)
        self.register_buffer("k_idx", k_idx.reshape(-1), persistent=False)
        self.register_buffer("v_idx", v_idx.reshape(-1), persistent=False)
        self.register_buffer("slot_valid", valid, persistent=False)

    def expand_kv(self, k: Tensor, v: Tensor, ctx):
        """(k', v', n, slot_allowed): the key axis n times wider, slot ``s * S + j`` holding key
        j of head ``area[h][s]``; ``slot_allowed`` (1, H, 1, n * S) masks slots off the edge."""
        B, H, S, D = k.shape
        n = self.area
        # (B, H, S, D) -> (B, H, n*S, D): slot s*S + j holds key j of head area[h][s]
        k2 = k.index_select(1, self.k_idx).view(B, H, n * S, D)
        v2 = v.index_select(1, self.v_idx).view(B, H, n * S, D)
        slot_allowed = None
        if not bool(self.slot_valid.all()):
            slot_allowed = self.slot_valid.repeat_interleave(S, dim=1)[None, :, None, :]  # (1, H, 1, n*S)
        return k2, v2, n, slot_allowed

    def widen(self, k: Tensor, v: Tensor, scores, ctx):
        """Keys and values of the area's heads side by side (:meth:`expand_kv`); the bias and
        mask over key positions repeated for each slot, the slots off the edge masked."""
        k, v, n, slot_allowed = self.expand_kv(k, v, ctx)
        ctx.kv_factor = n
        if scores.bias is not None:
            scores.bias = scores.bias.repeat(*([1] * (scores.bias.dim() - 1)), n)
        if scores.allowed is not None:
            scores.allowed = scores.allowed.repeat(*([1] * (scores.allowed.dim() - 1)), n)
        if slot_allowed is not None:
            scores.restrict(slot_allowed)
        return k, v

    def fold_weights(self, weights: Tensor, ctx) -> Tensor:
        """Sum the slots of one key position: (B, H, T, n * S) -> (B, H, T, S)."""
        B, H, T, _ = weights.shape
        return weights.view(B, H, T, ctx.kv_factor, ctx.src_len).sum(dim=3)

    def extra_repr(self):
        return (f"window={self.window}, heads={self.area}, head_edge={self.head_edge}, "
                f"layer={self.site.layer_idx}")
