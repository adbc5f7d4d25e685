"""The region-split path: the layer's only piece computes the whole attention of an encoder
self-attention from three key regions per query (relpos on CPU: ``region_forward``), and the
plumbing it uses for the far regions.

With a distance clipped at k, query i sees three regions of keys: the far left
``j < i - k``, the band ``|j - i| <= k`` and the far right ``j > i + k``. On a far region the
piece's score term is the same for every key, so the region is plain attention shifted by a
per-query constant. Per block of queries ``[a, e)``, the keys ``j < a - k`` are far left and
``j >= e + k`` far right for every query of the block: :func:`far_forward` runs them through
torch's CPU flash kernel (``_scaled_dot_product_flash_attention_for_cpu``) and returns their
output and log-sum-exp, :func:`far_backward` adds their share of the gradients. The piece
computes the block's strip of keys ``[a - k, e + k)`` itself (band and near parts of the far
regions), combines the three by their log-sum-exps and writes the backward.

The path runs what it was built for and declares the rest, so that the chooser skips it:
queries = keys without incremental decoding (so query and key positions are their indices,
``ctx.q_pos = ctx.k_pos = arange(T)``), no fairseq ``attn_mask``, no attention dropout.
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import PiecePath

HAVE_KERNEL = hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward")


class RegionSplit(PiecePath):
    name = "region split"
    own_piece = "region_path_ok"
    unavailable = None if HAVE_KERNEL else "torch has no CPU flash attention kernel (needs torch >= 2.2)"
    no_dropout = "the far regions run torch's flash kernel without it"
    queries_are_keys = True
    no_attn_mask = "the far regions are every key more than k away in the whole sentence"

    def piece_attention(self, piece, q, k, v, ctx, run):
        return piece.region_forward(q, k, v, ctx.key_padding_mask, run.scale)


def key_mask(q: Tensor, key_padding_mask: Optional[Tensor]) -> Optional[Tensor]:
    """The kernel's additive mask (B, 1, 1, S) of a padding mask (B, S) True = pad."""
    if key_padding_mask is None:
        return None
    B, S = key_padding_mask.shape
    return q.new_zeros(B, 1, 1, S).masked_fill(key_padding_mask[:, None, None, :], float("-inf"))


def spans(T: int, block: int, half: int) -> Tuple[Tuple[int, int, int, int, int], ...]:
    """``(side, a, e, j0, j1)``: the query block ``[a, e)`` against its far keys ``[j0, j1)``,
    side 0 the left ones (``j < a - half``), 1 the right ones (``j >= e + half``)."""
    out = []
    for a in range(0, T, block):
        e = min(T, a + block)
        if a - half > 0:
            out.append((0, a, e, 0, a - half))
        if e + half < T:
            out.append((1, a, e, e + half, T))
    return tuple(out)


def far_forward(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor],
                block: int, half: int, scale: float) -> Tuple[Tensor, Tensor, Tensor]:
    """Plain attention of each query block ``[a, e)`` (``block`` rows, queries = keys) over
    the keys left of its strip, ``j < a - half``, and right of it, ``j >= e + half``: two
    rectangular calls of torch's CPU flash kernel per block (the kernel computes whole key
    blocks of up to 512 keys, so one causal call per region would cost a full attention
    each; the rectangles skip the strip instead).

    q, k, v: (B, H, T, D); key_padding_mask (B, T) True = pad. Returns, side 0 the left keys,
    1 the right ones: out (2, B, H, T, D) (0 where a query has no such key), the kernel's
    log-sum-exp of the scaled scores (2, B, H, T) for :func:`far_backward` (0 where padding
    leaves a block no key, ``-inf`` where no span covers the rows), and ``lse``, the same
    with ``-inf`` wherever the query has no such key. No autograd: the caller's backward
    calls :func:`far_backward`."""
    B, H, T, D = q.shape
    mask = key_mask(q, key_padding_mask)
    out = q.new_zeros(2, B, H, T, D)
    kernel_lse = q.new_full((2, B, H, T), float("-inf"), dtype=torch.promote_types(q.dtype, torch.float32))
    for side, a, e, j0, j1 in spans(T, block, half):
        o, s = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q[:, :, a:e], k[:, :, j0:j1], v[:, :, j0:j1], 0.0, False,
            attn_mask=None if mask is None else mask[..., j0:j1], scale=scale)
        out[side, :, :, a:e] = o
        kernel_lse[side, :, :, a:e] = s
    lse = kernel_lse
    if key_padding_mask is not None:  # the kernel gives a row without keys lse 0: mark it
        kept = F.pad((~key_padding_mask).cumsum(1), (1, 0))  # (B, T + 1): keys before j
        empty = torch.zeros(2, B, 1, T, dtype=torch.bool, device=q.device)
        for side, a, e, j0, j1 in spans(T, block, half):
            empty[side, :, 0, a:e] = (kept[:, j1] - kept[:, j0] == 0)[:, None]
        lse = lse.masked_fill(empty, float("-inf"))
    return out, kernel_lse, lse


def far_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, kernel_lse: Tensor,
                 key_padding_mask: Optional[Tensor], block: int, half: int, scale: float,
                 dq: Tensor, dk: Tensor, dv: Tensor) -> None:
    """Add the far regions' share of the gradients to dq, dk, dv (B, H, T, D): the kernel's
    backward per span, given per side the rows' output gradient ``dout`` (2, B, H, T, D) and
    an ``out`` (2, B, H, T, D) whose ``dout_i . out_i`` is the softmax's ``delta_i`` (the
    kernel's ``dS_ij = P_ij (dout_i . v_j - dout_i . out_i)``): the caller decides what the
    rows are part of (the region's own output, or a larger softmax, see relpos)."""
    mask = key_mask(q, key_padding_mask)
    for side, a, e, j0, j1 in spans(q.size(2), block, half):
        gq, gk, gv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout[side, :, :, a:e], q[:, :, a:e], k[:, :, j0:j1], v[:, :, j0:j1], out[side, :, :, a:e],
            kernel_lse[side, :, :, a:e], 0.0, False, scale=scale,
            attn_mask=None if mask is None else mask[..., j0:j1])
        dq[:, :, a:e] += gq
        dk[:, :, j0:j1] += gk
        dv[:, :, j0:j1] += gv
