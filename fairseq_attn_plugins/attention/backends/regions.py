"""The region-split path: the layer's only piece computes the whole attention of an encoder
self-attention from three key regions per query (relpos on CPU: ``region_forward``), and the
plumbing it uses for the far regions.

With a distance clipped at k, query i sees three regions of keys: the far left
``j < i - k``, the band ``|j - i| <= k`` and the far right ``j > i + k``. On a far region the
piece's score term is the same for every key, so the region is plain attention shifted by a
per-query constant: :func:`far_left` / :func:`far_right` run it through torch's CPU flash
kernel (``_scaled_dot_product_flash_attention_for_cpu``, causal on the shifted sequences) and
return its output and log-sum-exp, differentiable in both (:class:`_FarRegion`). The piece
computes the band itself and combines the three by their log-sum-exps.

The path runs what it was built for and declares the rest, so that the chooser skips it:
queries = keys without incremental decoding (so query and key positions are their indices,
``ctx.q_pos = ctx.k_pos = arange(T)``), no fairseq ``attn_mask``, no attention dropout.
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import PiecePath

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


class RegionSplit(PiecePath):
    name = "region split"
    own_piece = "region_path_ok"
    no_dropout = "the far regions run torch's flash kernel without it"
    queries_are_keys = True
    no_attn_mask = "the far regions are the causal triangles of a whole sentence"

    def piece_attention(self, piece, q, k, v, ctx, run):
        return piece.region_forward(q, k, v, ctx.key_padding_mask, run.scale)


def far_left(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], dist: int,
             scale: float) -> Tuple[Tensor, Tensor]:
    """Plain attention of each query i over the keys ``j < i - dist`` (queries = keys).

    q, k, v: (B, H, T, D); key_padding_mask (B, T) True = pad. Returns out (B, H, T, D) and
    the log-sum-exp of the scaled scores (B, H, T), ``-inf`` and a zero output where the
    query has no such key (the first ``dist + 1`` queries, rows padding empties). Query
    ``i' = i - dist - 1`` of the shifted sequences sees keys ``j <= i'``: a causal call."""
    B, H, T, D = q.shape
    n = T - dist - 1
    if n <= 0:
        return q.new_zeros(B, H, T, D), q.new_full((B, H, T), float("-inf"))
    mask = None
    if key_padding_mask is not None:
        keys = key_padding_mask[:, :n]
        mask = q.new_zeros(B, 1, 1, n).masked_fill(keys[:, None, None, :], float("-inf"))
    out, lse = _FarRegion.apply(q[:, :, dist + 1:], k[:, :, :n], v[:, :, :n], mask, scale)
    if key_padding_mask is not None:  # the kernel gives an empty row lse 0: mark it
        has_key = (~keys).cumsum(1) > 0  # (B, n): a key j <= i'
        lse = lse.masked_fill(~has_key[:, None, :], float("-inf"))
    return F.pad(out, (0, 0, dist + 1, 0)), F.pad(lse, (dist + 1, 0), value=float("-inf"))


def far_right(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], dist: int,
              scale: float) -> Tuple[Tensor, Tensor]:
    """:func:`far_left` over the keys ``j > i + dist``: the same on the reversed sentence."""
    kpm = None if key_padding_mask is None else key_padding_mask.flip(1)
    out, lse = far_left(q.flip(2), k.flip(2), v.flip(2), kpm, dist, scale)
    return out.flip(2), lse.flip(2)


class _FarRegion(torch.autograd.Function):
    """torch's CPU flash attention, causal, as ``(out, lse)`` differentiable in both.

    The kernel's backward takes only the output's gradient dO; the log-sum-exp's gradient g
    enters through one more value column: with ``v' = [v, 1]``, ``dO' = [dO, g]`` and
    ``out' = [out, 0]`` it computes ``dS = P (dO' v'_j - dO' out'_i) = P (dO v_j - dO out_i)
    + g_i P``, the scores' gradient through both outputs; ``dv = dv'[..., :D]``. q and k get a
    zero column too (the kernel wants one head size; the scale is passed, the scores are the
    same)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale):
        out, lse = _flash(q, k, v, 0.0, True, attn_mask=mask, scale=scale)
        ctx.save_for_backward(q, k, v, mask, out, lse)
        ctx.scale = scale
        return out, lse.to(q.dtype)

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, mask, out, lse = ctx.saved_tensors
        D = q.size(-1)
        if dout is None:
            dout = torch.zeros_like(out)
        if dlse is None:
            dlse = torch.zeros_like(lse)

        def column(x: Tensor, value) -> Tensor:
            if not torch.is_tensor(value):
                value = x.new_full(x.shape[:-1] + (1,), value)
            return torch.cat([x, value.to(x.dtype)], dim=-1)

        dq, dk, dv = _flash_backward(column(dout, dlse[..., None]), column(q, 0.0), column(k, 0.0),
                                     column(v, 1.0), column(out, 0.0), lse, 0.0, True,
                                     attn_mask=mask, scale=ctx.scale)
        return dq[..., :D], dk[..., :D], dv[..., :D], None, None
