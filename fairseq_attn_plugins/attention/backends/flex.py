"""The generic ``flex_attention`` plumbing, and the block-sparse band path.

``torch.nn.attention.flex_attention`` runs attention with a ``score_mod`` (a function of
the score and its (b, h, i, j) indices) and a block mask (blocks of keys a query block
never sees are skipped), never materialising the (B, H, T, S) probability matrix on the
GPU (one compiled Triton kernel on CUDA; on CPU it runs eagerly, densely, which is what
the exactness tests use). This module holds what every flex computation shares:

* :func:`call`: one fused call, optionally returning the log-sum-exp;
* :func:`block_mask`: ``create_block_mask``, reused across the layers of one forward;
* :func:`split_attn_mask` / :func:`allowed_mod`: fairseq's masks as a ``mask_mod``;
* :func:`masked_attention`: the **band path**: any dense boolean ``allowed`` mask and
  additive ``bias`` (1D-/2D-CSAN windows, band masks generally) as a ``mask_mod`` /
  ``score_mod``; ``create_block_mask`` marks the key blocks outside the band, which the
  kernel skips: O(T * window) work instead of O(T^2).

A piece's own flex math lives in its file and is reached through its ``flex_forward``
(relpos: keys and values with the value term rebuilt from the log-sum-exp; alibi: its
distance penalty as a ``score_mod``). flex_attention has no attention dropout: the
chooser (:mod:`.`) takes a flex path only with dropout 0. On CUDA ``flex_attention`` is
wrapped in ``torch.compile`` once (first call compiles, minutes at worst).
"""

import weakref
from collections import OrderedDict
from typing import Optional

import torch
from torch import Tensor

try:  # torch >= 2.5 (AuxRequest: 2.9)
    import torch.nn.attention.flex_attention as _flex_mod
    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask

    HAVE_FLEX = True
except ImportError:  # pragma: no cover - older torch
    HAVE_FLEX = False

#: on CUDA, ``--attn-backend auto`` sends band-masked layers to flex from this length
FLEX_WINDOW_MIN_LEN = 512
_compiled = None


def kernel(q: Tensor):
    """flex_attention: compiled on CUDA (the fused kernel), eager elsewhere."""
    global _compiled
    if q.is_cuda:
        if _compiled is None:
            _compiled = torch.compile(_flex_mod.flex_attention)
        return _compiled
    return _flex_mod.flex_attention


_MASK_CACHE: "OrderedDict[tuple, tuple]" = OrderedDict()
_MASK_CACHE_SIZE = 8


def block_mask(mask_mod, B: Optional[int], T: int, S: int, device, key=None, tensors=()):
    """``create_block_mask``, reused across the layers of one forward: the layers of an
    encoder (decoder) see the same padding (future) mask tensors. ``key`` names the mask
    function's other inputs; ``tensors`` are the mask tensors it reads, matched by
    identity (weak references: a freed tensor never matches) and in-place version."""
    if key is None:
        return create_block_mask(mask_mod, B, None, T, S, device=device)
    full_key = (key, B, T, S, str(device),
                tuple((id(t), t._version) if t is not None else None for t in tensors))
    hit = _MASK_CACHE.get(full_key)
    if hit is not None and all((r is None and t is None) or (r is not None and r() is t)
                               for r, t in zip(hit[0], tensors)):
        _MASK_CACHE.move_to_end(full_key)
        return hit[1]
    bm = create_block_mask(mask_mod, B, None, T, S, device=device)
    _MASK_CACHE[full_key] = (tuple(weakref.ref(t) if t is not None else None for t in tensors), bm)
    while len(_MASK_CACHE) > _MASK_CACHE_SIZE:
        _MASK_CACHE.popitem(last=False)
    return bm


def call(q, k, v, score_mod, mask, scale, lse: bool = False):
    """One fused call; returns ``out`` or ``(out, lse)``; lse is -inf on rows with no key."""
    run = kernel(q)
    if not lse:
        return run(q, k, v, score_mod=score_mod, block_mask=mask, scale=scale)
    out, aux = run(q, k, v, score_mod=score_mod, block_mask=mask, scale=scale,
                   return_aux=AuxRequest(lse=True))
    return out, aux.lse


def masked_attention(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor],
                     allowed: Optional[Tensor], scale: float) -> Tensor:
    """``softmax(scale q k^T + bias, ~allowed) v`` with blocks outside ``allowed`` skipped.

    q: (B, H, T, D), k, v: (B, H, S, D); bias (float) and allowed (bool, True = may attend)
    broadcastable to (B, H, T, S) with leading dims of size B|1 and H|1."""
    B, H, T, _ = q.shape
    S = k.size(2)

    def lead(x):  # (B|1, H|1, T, S) as 4 dims
        return x if x.dim() == 4 else x.view(*([1] * (4 - x.dim())), *x.shape)

    score_mod = mask = None
    if bias is not None:
        bs = lead(bias)
        nb, nh = bs.size(0), bs.size(1)

        def score_mod(score, b, h, i, j):
            return score + bs[b % nb, h % nh, i, j]

    if allowed is not None:
        al = lead(allowed)
        na, nha = al.size(0), al.size(1)

        def mask_mod(b, h, i, j):
            return al[b % na, h % nha, i, j]

        mask = create_block_mask(mask_mod, B if na > 1 else None, H if nha > 1 else None,
                                 T, S, device=q.device)
    return call(q, k, v, score_mod, mask, scale)


def split_attn_mask(attn_mask: Optional[Tensor]):
    """fairseq's (T, S) attention mask -> (additive finite part or None, allowed bool or None)."""
    if attn_mask is None:
        return None, None
    if attn_mask.dtype == torch.bool:
        return None, ~attn_mask
    keep = attn_mask > float("-inf")
    return attn_mask.masked_fill(~keep, 0.0), keep


def allowed_mod(kpm: Optional[Tensor], keep: Optional[Tensor]):
    """``mask_mod``: key j is no pad of row b (``kpm`` (B, S), True = pad) and ``keep[i, j]``."""
    def allowed(b, h, i, j):
        ok = j >= 0
        if kpm is not None:
            ok = ok & ~kpm[b, j]
        if keep is not None:
            ok = ok & keep[i, j]
        return ok

    return allowed
