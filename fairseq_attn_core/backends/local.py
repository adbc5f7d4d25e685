"""Block-local fused attention for band-limited masks (the CSAN windows).

When every allowed key of query i lies within ``half`` positions of i, attention
needs only O(T * (block + 2 half)) scores instead of O(T^2). The sequence is cut
into query blocks of ``block`` positions; block b attends to the keys
``[b*block - half, (b+1)*block + half)``. The mask of each block is cut from the
dense mask, so the result is exactly that of dense attention with that mask
(the probabilities outside the band are zero either way). Each block runs
through ``scaled_dot_product_attention`` as one batch.

**Widened keys** (a piece that widens the key axis ``ctx.kv_factor`` = n times: 2D-CSAN):
the key axis holds n slots of T positions, slot ``s * T + j`` (``AttentionContext.kv_factor``),
and the band holds in each slot. Each block then attends to the band of every slot, side by
side (n * (block + 2 half) keys), its mask cut the same way from each slot's part of the
dense mask (the slots off the head edge, the other pieces' bias and mask repeated per slot),
so one softmax still runs over the union, as on the dense path. Kept for the backward,
these key blocks would be n times the keys (at L = 512, 2D-CSAN: 1.4x stock fairseq's
training memory on CPU); such a layer's attention is recomputed in the backward instead
(``torch.utils.checkpoint``), keeping only q, k and v.

A mask per head (the 2D-CSAN edge) puts the query blocks with the heads, (B, H * blocks),
so that one mask serves the whole batch; a mask shared by the heads puts them in the
batch, (B * blocks, H).

The **block-local path** (:class:`BlockLocal`): self-attention from the policy's
``local_min_len`` positions (:mod:`.policy`; blocks of its ``local_block`` rows) when a piece
declares ``band_half`` (1D-/2D-CSAN) and every piece runs fused.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .base import HookPath
from .policy import DEFAULT
from .sdpa import sdpa_backends, sdpa_mask


def _band_blocks(mask: Tensor, half: int, block: int, nb: int) -> Tensor:
    """(..., T, T) bool/float mask -> (..., nb, block, block + 2 half) band blocks (a view)."""
    T = mask.size(-1)
    Tp = nb * block
    is_bool = mask.dtype == torch.bool
    off = False if is_bool else float("-inf")
    on = True if is_bool else 0.0
    m = F.pad(mask, (half, Tp - T + half), value=off)  # keys outside [0, T): never
    m = F.pad(m, (0, 0, 0, Tp - T), value=on)  # padding queries: any key (discarded)
    W = block + 2 * half
    m = m.view(*m.shape[:-2], nb, block, Tp + 2 * half).unfold(-1, W, block)  # (...,nb,blk,nb,W)
    return torch.diagonal(m, dim1=-4, dim2=-2).movedim(-1, -3)  # (..., nb, blk, W)


def local_sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], half: int,
               scale: float, dropout_p: float = 0.0, block: int = DEFAULT.local_block, slots: int = 1) -> Tensor:
    """Same result as ``F.scaled_dot_product_attention(q, k, v, mask)`` when ``mask``
    allows only keys with |i - j| <= half in each of the ``slots`` slots of the key axis.
    q: (B, H, T, D); k, v: (B, H, slots * T, D), slot ``s * T + j`` at key position j;
    mask broadcastable to (B, H, T, slots * T), bool (True = may attend) or additive float."""
    B, H, T, D = q.shape
    nb = -(-T // block)
    Tp = nb * block
    W = block + 2 * half
    if mask is None:
        mask = torch.ones(1, 1, T, slots * T, dtype=torch.bool, device=q.device)
    while mask.dim() < 4:
        mask = mask[None]
    mask = mask.expand(*mask.shape[:2], T, slots * T)
    b1, h1 = mask.shape[:2]
    # each slot's band blocks side by side (slot s at s * W): (b1, h1, nb, blk, slots * W)
    band = _band_blocks(mask.view(b1, h1, T, slots, T).transpose(2, 3), half, block, nb)
    band = band.permute(0, 1, 3, 4, 2, 5).reshape(b1, h1, nb, block, slots * W)
    qb = (F.pad(q, (0, 0, 0, Tp - T)) if Tp > T else q).view(B, H, nb, block, D)
    kb, vb = (_key_blocks(x, slots, half, block, nb) for x in (k, v))  # (B, H, nb, slots*W, D)
    if h1 == 1:  # the mask is shared by the heads: blocks in the batch, (B * nb, H)
        qb, kb, vb = (x.transpose(1, 2).reshape(B * nb, H, *x.shape[-2:]) for x in (qb, kb, vb))
        band = band.transpose(1, 2).expand(B, nb, 1, block, slots * W).reshape(B * nb, 1, block, -1)
    else:  # a mask per head: blocks with the heads, (B, H * nb), the mask broadcast over B
        qb, kb, vb = (x.reshape(B, H * nb, *x.shape[-2:]) for x in (qb, kb, vb))
        band = band.reshape(b1, H * nb, block, slots * W)
    out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=band, dropout_p=dropout_p,
                                         scale=scale)
    if h1 == 1:
        out = out.view(B, nb, H, block, D).transpose(1, 2)
    return out.reshape(B, H, Tp, D)[:, :, :T]


def _key_blocks(x: Tensor, slots: int, half: int, block: int, nb: int) -> Tensor:
    """(B, H, slots * T, D) -> (B, H, nb, slots * W, D): for each query block, the keys
    ``[b*block - half, (b+1)*block + half)`` of each slot side by side. Positions outside
    [0, T) repeat the nearest key: the band mask allows them to no query that is kept
    (weight exactly 0, so no gradient either). One gather, its backward one ``index_add_``."""
    B, H, ST, D = x.shape
    T = ST // slots
    W = block + 2 * half
    pos = torch.arange(nb, device=x.device)[:, None] * block - half + torch.arange(W, device=x.device)
    idx = pos.clamp(0, T - 1)[:, None, :] + torch.arange(slots, device=x.device)[:, None] * T
    # (nb, slots, W) positions; a gather along dim 1 of (B * H, ...) is the fastest on CPU
    return x.reshape(B * H, ST, D).index_select(1, idx.view(-1)).view(B, H, nb, slots * W, D)


class BlockLocal(HookPath):
    name = "block-local"
    fused_pieces_only = True
    needs_band = True
    queries_are_keys = True

    def apply(self, q, k, v, ctx, run):
        if not (torch.is_grad_enabled() and any(p.expands_kv for p in run.pieces)):
            return super().apply(q, k, v, ctx, run)
        # widened keys: their blocks are n times the keys; recomputed in the backward, not kept
        # (the random state of attention dropout is replayed)
        return checkpoint(super().apply, q, k, v, ctx, run, use_reentrant=False)

    def attend(self, q, k, v, scores, ctx, run):
        mask = sdpa_mask(scores.bias, scores.allowed, q.dtype)
        block = run.policy.local_block
        run.query_blocks = -(-q.size(2) // block)
        with sdpa_backends(q, mask, scores.piece_made):
            return local_sdpa(q, k, v, mask, run.band_half, run.scale, run.dropout_p, block=block,
                              slots=ctx.kv_factor), None
