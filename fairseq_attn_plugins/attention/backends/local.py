"""Block-local fused attention for band-limited masks (the CSAN window).

When every allowed key of query i lies within ``half`` positions of i, attention
needs only O(T * (block + 2 half)) scores instead of O(T^2). The sequence is cut
into query blocks of ``block`` positions; block b attends to the keys
``[b*block - half, (b+1)*block + half)``. The mask of each block is cut from the
dense mask, so the result is exactly that of dense attention with that mask
(the probabilities outside the band are zero either way). Each block runs
through ``scaled_dot_product_attention`` as one batch.

The **block-local path** (:class:`BlockLocal`): self-attention of length >= ``LOCAL_MIN_LEN``
when a piece declares ``band_half`` (1D-CSAN) and every piece runs fused.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import HookPath
from .sdpa import sdpa_backends, sdpa_mask

#: shortest sequence for which the block-local path is used
LOCAL_MIN_LEN = 256
#: query block size
BLOCK = 128


def _band_blocks(mask: Tensor, half: int, block: int, nb: int) -> Tensor:
    """(b, h, T, T) bool/float mask -> (b, h, nb, block, block + 2 half) band blocks."""
    T = mask.size(-1)
    Tp = nb * block
    is_bool = mask.dtype == torch.bool
    off = False if is_bool else float("-inf")
    on = True if is_bool else 0.0
    m = F.pad(mask, (half, Tp - T + half), value=off)  # keys outside [0, T): never
    m = F.pad(m, (0, 0, 0, Tp - T), value=on)  # padding queries: any key (discarded)
    W = block + 2 * half
    m = m.view(*m.shape[:2], nb, block, Tp + 2 * half).unfold(-1, W, block)  # (b,h,nb,blk,nb,W)
    return torch.diagonal(m, dim1=2, dim2=4).permute(0, 1, 4, 2, 3)  # (b, h, nb, blk, W)


def local_sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], half: int,
               scale: float, dropout_p: float = 0.0, block: int = BLOCK) -> Tensor:
    """Same result as ``F.scaled_dot_product_attention(q, k, v, mask)`` when ``mask``
    allows only keys with |i - j| <= half. q, k, v: (B, H, T, D); mask broadcastable
    to (B, H, T, T), bool (True = may attend) or additive float."""
    B, H, T, D = q.shape
    nb = -(-T // block)
    Tp = nb * block
    W = block + 2 * half
    if mask is None:
        mask = torch.ones(1, 1, T, T, dtype=torch.bool, device=q.device)
    if mask.dim() == 2:
        mask = mask[None, None]
    band = _band_blocks(mask, half, block, nb)  # (b1, h1, nb, blk, W)
    b1, h1 = band.shape[:2]
    band = band.permute(0, 2, 1, 3, 4).expand(B, nb, h1, block, W).reshape(B * nb, h1, block, W)

    qb = F.pad(q, (0, 0, 0, Tp - T)).view(B, H, nb, block, D)
    qb = qb.permute(0, 2, 1, 3, 4).reshape(B * nb, H, block, D)

    def kv_blocks(x):
        xp = F.pad(x, (0, 0, half, Tp - T + half))  # (B, H, Tp + 2 half, D)
        xb = xp.unfold(2, W, block).transpose(-1, -2)  # (B, H, nb, W, D), a view
        return xb.permute(0, 2, 1, 3, 4).reshape(B * nb, H, W, D)

    out = F.scaled_dot_product_attention(qb, kv_blocks(k), kv_blocks(v), attn_mask=band,
                                         dropout_p=dropout_p, scale=scale)  # (B*nb, H, blk, D)
    out = out.view(B, nb, H, block, D).permute(0, 2, 1, 3, 4).reshape(B, H, Tp, D)
    return out[:, :, :T]


class BlockLocal(HookPath):
    name = "block-local"
    fused_pieces_only = True
    needs_band = True
    queries_are_keys = True
    widened_keys = False

    def attend(self, q, k, v, scores, ctx, run):
        mask = sdpa_mask(scores.bias, scores.allowed, q.dtype)
        with sdpa_backends(q, mask, scores.piece_made):
            return local_sdpa(q, k, v, mask, run.band_half, run.scale, run.dropout_p), None
