"""``flex_attention`` paths: fused relative positions (keys and values) and block-sparse bands.

Two computations that never materialise the (B, H, T, S) probability matrix on the GPU
(``torch.nn.attention.flex_attention``, compiled to one Triton kernel on CUDA; on CPU it
runs eagerly, densely, which is what the exactness tests use):

* :func:`relpos_attention`, Shaw et al. (2018) with keys AND values. The key term is a
  ``score_mod``: ``score + qa[b, h, i, clip(j - i, k) + k]`` with ``qa = scale * q w_K^T``
  (B, H, T, 2k+1). The value term ``sum_j p_ij w_V[clip(j - i, k)]`` is rebuilt from the
  log-sum-exp ``lse`` that the fused call returns:

  - inside the clip window (|j - i| < k) each distance has one key, so
    ``p_ij = exp(e_ij - lse_i)`` with ``e_ij`` recomputed for that band only
    (:func:`band_scores`, O(T k D) work, O(T k) memory);
  - the right tail (j - i >= k) needs only its total mass: a second fused call restricted
    to that tail (block-sparse; empty under a causal mask) gives ``lse_R`` and
    ``M_R = exp(lse_R - lse)``;
  - the left tail is what remains: ``M_L = 1 - M_R - sum(band)``.

  Then ``value_term = band @ w_V[1:2k] + M_L w_V[0] + M_R w_V[2k]``. Exact (the same sums,
  regrouped); gradients flow through ``out``, ``lse`` and ``qa`` (flex supports both).
* :func:`masked_attention`: any dense boolean ``allowed`` mask and additive ``bias``
  (1D-/2D-CSAN windows, band masks generally) as a ``mask_mod``/``score_mod``;
  ``create_block_mask`` marks the key blocks outside the band, which the kernel skips:
  O(T * window) work instead of O(T^2).
* :func:`distance_bias_attention`: ALiBi's per-head linear distance penalty as a
  ``score_mod`` (no bias tensor), padding and the future mask as a block mask.

Neither supports attention dropout (flex_attention has none): the dispatcher
(:mod:`.core`) uses them only with dropout 0. On CUDA ``flex_attention`` is wrapped in
``torch.compile`` once (first call compiles, minutes at worst); on CPU it runs eagerly.
"""

import weakref
from collections import OrderedDict
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

try:  # torch >= 2.5 (AuxRequest: 2.9)
    import torch.nn.attention.flex_attention as _flex_mod
    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask

    HAVE_FLEX = True
except ImportError:  # pragma: no cover - older torch
    HAVE_FLEX = False

#: on CUDA, ``--attn-backend auto`` sends band-masked layers to flex from this length
FLEX_WINDOW_MIN_LEN = 512
#: query block of :func:`band_scores`
BAND_BLOCK = 32

_compiled = None


def _kernel(q: Tensor):
    """flex_attention: compiled on CUDA (the fused kernel), eager elsewhere."""
    global _compiled
    if q.is_cuda:
        if _compiled is None:
            _compiled = torch.compile(_flex_mod.flex_attention)
        return _compiled
    return _flex_mod.flex_attention


_MASK_CACHE: "OrderedDict[tuple, tuple]" = OrderedDict()
_MASK_CACHE_SIZE = 8


def _block_mask(mask_mod, B: Optional[int], T: int, S: int, device, key=None, tensors=()):
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


def _fused(q, k, v, score_mod, block_mask, scale, lse: bool = False):
    """One fused call; returns ``out`` or ``(out, lse)``; lse is -inf on rows with no key."""
    kernel = _kernel(q)
    if not lse:
        return kernel(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
    out, aux = kernel(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale,
                      return_aux=AuxRequest(lse=True))
    return out, aux.lse


# ---------------------------------------------------------------------------
# Band masks (CSAN windows)
# ---------------------------------------------------------------------------
def masked_attention(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor],
                     allowed: Optional[Tensor], scale: float) -> Tensor:
    """``softmax(scale q k^T + bias, ~allowed) v`` with blocks outside ``allowed`` skipped.

    q: (B, H, T, D), k, v: (B, H, S, D); bias (float) and allowed (bool, True = may attend)
    broadcastable to (B, H, T, S) with leading dims of size B|1 and H|1."""
    B, H, T, _ = q.shape
    S = k.size(2)

    def lead(x):  # (B|1, H|1, T, S) as 4 dims
        return x if x.dim() == 4 else x.view(*([1] * (4 - x.dim())), *x.shape)

    score_mod = block_mask = None
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

        block_mask = create_block_mask(mask_mod, B if na > 1 else None, H if nha > 1 else None,
                                       T, S, device=q.device)
    return _fused(q, k, v, score_mod, block_mask, scale)


# ---------------------------------------------------------------------------
# Relative positions
# ---------------------------------------------------------------------------
def band_scores(q: Tensor, k: Tensor, start: int, half: int, block: int = BAND_BLOCK) -> Tensor:
    """``q_i . k_{start + i + d}`` for d = -half..half as (B, H, T, 2 half + 1); zero where
    the key position falls outside [0, S).

    Query blocks of ``block`` rows against their ``block + 2 half`` keys (one batched
    matmul), then each row's diagonal band is cut out with a skew (flat view with row
    stride ``W + 1``): no (T, S) matrix, no per-query copy of the keys."""
    B, H, T, D = q.shape
    S = k.size(2)
    block = max(1, min(block, T))
    nb = -(-T // block)
    Tp = nb * block
    W = block + 2 * half
    kp = F.pad(k, (0, 0, half, max(0, start + Tp + half - S)))  # kp[x] = key x - half
    kw = kp[:, :, start: start + Tp + 2 * half].unfold(2, W, block)  # (B, H, nb, D, W)
    qb = F.pad(q, (0, 0, 0, Tp - T)).view(B, H, nb, block, D)
    sc = torch.matmul(qb, kw)  # (B, H, nb, block, W): row r, column c = key b*block + r + c - half
    flat = F.pad(sc.reshape(B, H, nb, block * W), (0, block))
    band = flat.view(B, H, nb, block, W + 1)[..., : 2 * half + 1]  # column d + half
    return band.reshape(B, H, Tp, 2 * half + 1)[:, :, :T]


def _split_attn_mask(attn_mask: Optional[Tensor]):
    """fairseq's (T, S) attention mask -> (additive finite part or None, allowed bool or None)."""
    if attn_mask is None:
        return None, None
    if attn_mask.dtype == torch.bool:
        return None, ~attn_mask
    keep = attn_mask > float("-inf")
    return attn_mask.masked_fill(~keep, 0.0), keep


def _allowed_mod(kpm: Optional[Tensor], keep: Optional[Tensor]):
    """``mask_mod``: key j is no pad of row b (``kpm`` (B, S), True = pad) and ``keep[i, j]``."""
    def allowed(b, h, i, j):
        ok = j >= 0
        if kpm is not None:
            ok = ok & ~kpm[b, j]
        if keep is not None:
            ok = ok & keep[i, j]
        return ok

    return allowed


def relpos_attention(q: Tensor, k: Tensor, v: Tensor, rel_keys: Tensor,
                     rel_values: Optional[Tensor], kmax: int, start: int,
                     key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor],
                     scale: float) -> Tensor:
    """Shaw et al. relative positions through flex_attention (see module docstring).

    q: (B, H, T, D) at positions start..start+T-1; k, v: (B, H, S, D) at 0..S-1;
    rel_keys / rel_values: (2 kmax + 1, D) tables (rel_values None: keys only);
    key_padding_mask (B, S) True = pad; attn_mask fairseq's (T, S) float (0 / -inf) or
    bool (True = masked). Returns (B, H, T, D)."""
    B, H, T, D = q.shape
    S = k.size(2)
    R = 2 * kmax + 1
    qa = torch.matmul(q, rel_keys.to(q.dtype).t()) * scale  # (B, H, T, 2k+1)
    add, keep = _split_attn_mask(attn_mask)
    kpm = key_padding_mask

    def score_mod(score, b, h, i, j):
        score = score + qa[b, h, i, (j - i - start).clamp(-kmax, kmax) + kmax]
        if add is not None:
            score = score + add[i, j]
        return score

    allowed = _allowed_mod(kpm, keep)
    masked = kpm is not None or keep is not None
    B_mask = B if kpm is not None else None
    mask_tensors = (kpm, attn_mask)
    block_mask = (_block_mask(allowed, B_mask, T, S, q.device, ("relpos", start), mask_tensors)
                  if masked else None)
    if rel_values is None:
        return _fused(q, k, v, score_mod, block_mask, scale)
    out, lse = _fused(q, k, v, score_mod, block_mask, scale, lse=True)  # lse (B, H, T) fp32
    acc = torch.promote_types(q.dtype, torch.float32)  # fp32 for fp16/bf16, else q's
    lse = lse.to(acc)
    has_key = torch.isfinite(lse)
    lse_safe = torch.where(has_key, lse, torch.zeros_like(lse))

    # inside the window: one key per distance d = -(k-1)..k-1
    half = kmax - 1
    d = torch.arange(-half, half + 1, device=q.device)
    j = start + torch.arange(T, device=q.device)[:, None] + d  # (T, 2 half + 1) key position
    valid = ((j >= 0) & (j < S))[None, None]  # (1, 1, T, W)
    jc = j.clamp(0, S - 1)
    e = band_scores(q, k, start, half).to(acc) * scale + qa[..., 1: R - 1].to(acc)
    if add is not None:
        e = e + add.to(acc).gather(1, jc)
    if keep is not None:
        valid = valid & keep.gather(1, jc)
    if kpm is not None:
        valid = valid & ~kpm[:, jc][:, None]  # (B, 1, T, W)
    e = torch.where(valid, e - lse_safe[..., None], torch.full_like(e, float("-inf")))
    band = torch.exp(e)  # (B, H, T, 2 half + 1) probabilities of the window's keys

    # right tail j - i >= k: its total mass from a second call restricted to it
    mass_right = torch.zeros_like(lse_safe)
    if start + kmax <= S - 1:  # some query has a key k or more to its right
        def right_tail(b, h, i, j):
            return allowed(b, h, i, j) & (j - i - start >= kmax)

        tail_mask = _block_mask(right_tail, B_mask, T, S, q.device,
                                ("relpos_right_tail", start, kmax), mask_tensors)
        # only the lse is used: a narrow zero value keeps the p @ v part of the call small
        v0 = v.new_zeros(B, H, S, min(D, 16))
        _, lse_r = _fused(q, k, v0, score_mod, tail_mask, scale, lse=True)
        lse_r = lse_r.to(acc)
        has_tail = torch.isfinite(lse_r) & has_key
        lse_r = torch.where(has_tail, lse_r, lse_safe)
        mass_right = torch.where(has_tail, torch.exp(lse_r - lse_safe), mass_right)
    mass_left = has_key.to(acc) - mass_right - band.sum(-1)

    table = rel_values.to(acc)
    extra = (torch.matmul(band, table[1: R - 1])
             + mass_left[..., None] * table[0] + mass_right[..., None] * table[R - 1])
    return out + extra.to(out.dtype)


# ---------------------------------------------------------------------------
# Linear distance penalty (ALiBi)
# ---------------------------------------------------------------------------
def distance_bias_attention(q: Tensor, k: Tensor, v: Tensor, slopes: Tensor, start: int,
                            key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor],
                            scale: float) -> Tensor:
    """``softmax(scale q k^T - slopes[h] |i - j|)`` v through flex_attention.

    q: (B, H, T, D) at positions start..start+T-1; k, v: (B, H, S, D) at 0..S-1;
    slopes (H,) float32; key_padding_mask (B, S) True = pad; attn_mask fairseq's (T, S)
    float (0 / -inf) or bool (True = masked). Returns (B, H, T, D)."""
    B, H, T, D = q.shape
    S = k.size(2)
    add, keep = _split_attn_mask(attn_mask)
    kpm = key_padding_mask
    offset = torch.tensor(start, device=q.device)  # a tensor: no recompilation per decoding step

    def score_mod(score, b, h, i, j):
        score = score - slopes[h] * (i + offset - j).abs()
        if add is not None:
            score = score + add[i, j]
        return score

    block_mask = None
    if kpm is not None or keep is not None:
        block_mask = _block_mask(_allowed_mod(kpm, keep), B if kpm is not None else None, T, S, q.device,
                                 ("distance_bias", start), (kpm, attn_mask))
    return _fused(q, k, v, score_mod, block_mask, scale)
