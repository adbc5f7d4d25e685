"""Distance terms (:class:`.distance.DistanceTerms`) through flex_attention, and the flex
piece path that runs them (:class:`FlexPiece`).

The forms are built from the declaration alone: fixed slopes (alibi) are a ``score_mod``;
a key table (relpos) is a ``score_mod`` reading ``qa = scale q w_K^T`` (B, H, T, 2k+1) once
with a clamped index, and a value table's term ``sum_j p_ij w_V[clip(j - i)]`` is rebuilt
from the log-sum-exp of the fused call (:func:`clipped_tables_attention`). Every captured
value is a tensor (the offset and the clip 0-dim tensors): inductor cannot lower a captured
Python number under dynamic shapes (it becomes a symbol without a dtype: "'ShapeAsConstantBuffer'
object has no attribute 'dtype'", seen on an H200 with torch 2.11), and :func:`.flex.call`
refuses one. The score_mod / mask_mod factories are module-level so that compiled
flex_attention sees one form per layer configuration.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import flex
from ..base import PiecePath
from .terms import DistanceTerms


class FlexPiece(flex.FlexPath, PiecePath):
    """The layer's only piece computes the whole attention through flex_attention, from its
    distance terms (relpos kv/tied, alibi)."""

    name = "flex piece"
    takes = "flex"

    def piece_attention(self, piece, q, k, v, ctx, run):
        start = ctx.src_len - ctx.tgt_len  # positions decoded by earlier incremental steps
        return flex_distance_attention(piece.distance_terms(), q, k, v, start, ctx.key_padding_mask,
                                       run.attn_mask, run.scale, run.flex_compile, run.policy.band_block)


def flex_distance_attention(terms: DistanceTerms, q: Tensor, k: Tensor, v: Tensor, start: int,
                            key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor],
                            scale: float, compile: str = "none", band_block: int = 32) -> Tensor:
    """``terms`` through flex_attention, (B, H, T, D). q at positions start..start+T-1; k, v
    at 0..S-1; key_padding_mask (B, S) True = pad; attn_mask fairseq's (T, S) float
    (0 / -inf) or bool (True = masked); compile: ``--attn-flex-compile``."""
    if terms.slopes is not None:
        slopes = torch.tensor(terms.slopes, dtype=torch.promote_types(q.dtype, torch.float32),
                              device=q.device)
        return slopes_attention(q, k, v, slopes, start, key_padding_mask, attn_mask, scale, compile)
    return clipped_tables_attention(q, k, v, terms.key_table, terms.value_table, terms.clip, start,
                                    key_padding_mask, attn_mask, scale, compile, band_block)


def slopes_attention(q: Tensor, k: Tensor, v: Tensor, slopes: Tensor, start: int,
                     key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor],
                     scale: float, compile: str = "none") -> Tensor:
    """``softmax(scale q k^T - slopes[h] |i - j|) v`` (ALiBi); slopes (H,) in float32 for
    fp16/bf16/fp32 inputs, float64 for float64 ones."""
    B, H, T, D = q.shape
    S = k.size(2)
    add, keep = flex.split_attn_mask(attn_mask)
    offset = torch.tensor(start, device=q.device)  # a tensor: no recompilation per decoding step
    score_mod = slopes_score_mod(slopes, offset) if add is None else slopes_add_score_mod(slopes, add, offset)
    _, mask = flex.layer_mask(key_padding_mask, keep, B, T, S, q.device, "distance_bias", attn_mask)
    return flex.call(q, k, v, score_mod, mask, scale, compile=compile)


def slopes_score_mod(slopes: Tensor, offset: Tensor):
    """``score - slopes[h] |i + offset - j|``."""
    def score_mod(score, b, h, i, j):
        return score - slopes[h] * (i + offset - j).abs()

    return score_mod


def slopes_add_score_mod(slopes: Tensor, add: Tensor, offset: Tensor):
    """:func:`slopes_score_mod` plus fairseq's additive mask ``add[i, j]``."""
    def score_mod(score, b, h, i, j):
        return score - slopes[h] * (i + offset - j).abs() + add[i, j]

    return score_mod


def band_scores(q: Tensor, k: Tensor, start: int, half: int, block: int = 32) -> Tensor:
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


def clipped_tables_attention(q: Tensor, k: Tensor, v: Tensor, rel_keys: Tensor,
                             rel_values: Optional[Tensor], kmax: int, start: int,
                             key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor],
                             scale: float, compile: str = "none", band_block: int = 32) -> Tensor:
    """Shaw et al. relative positions through flex_attention, keys AND values.

    The key term is a ``score_mod``: ``score + qa[b, h, i, clip(j - i, k) + k]`` with
    ``qa = scale * q w_K^T`` (B, H, T, 2k+1). The value term ``sum_j p_ij w_V[clip(j - i, k)]``
    is rebuilt from the log-sum-exp ``lse`` that the fused call returns:

    - inside the clip window (|j - i| < k) each distance has one key, so
      ``p_ij = exp(e_ij - lse_i)`` with ``e_ij`` recomputed for that band only
      (:func:`band_scores`, O(T k D) work, O(T k) memory);
    - the right tail (j - i >= k) needs only its total mass: a second fused call restricted
      to that tail (block-sparse; empty under a causal mask) gives ``lse_R`` and
      ``M_R = exp(lse_R - lse)``;
    - the left tail is what remains: ``M_L = 1 - M_R - sum(band)``.

    Then ``value_term = band @ w_V[1:2k] + M_L w_V[0] + M_R w_V[2k]``. Exact (the same sums,
    regrouped); gradients flow through ``out``, ``lse`` and ``qa`` (flex supports both).
    rel_values None: keys only."""
    B, H, T, D = q.shape
    S = k.size(2)
    R = 2 * kmax + 1
    qa = torch.matmul(q, rel_keys.to(q.dtype).t()) * scale  # (B, H, T, 2k+1)
    add, keep = flex.split_attn_mask(attn_mask)
    kpm = key_padding_mask
    offset = torch.tensor(start, device=q.device)  # a tensor: no recompilation per decoding step
    clip = torch.tensor(kmax, device=q.device)  # a tensor: inductor lowers no captured number
    score_mod = (clipped_score_mod(qa, offset, clip) if add is None
                 else clipped_add_score_mod(qa, add, offset, clip))
    allowed, block_mask = flex.layer_mask(kpm, keep, B, T, S, q.device, "relpos", attn_mask)
    if rel_values is None:
        return flex.call(q, k, v, score_mod, block_mask, scale, compile=compile)
    out, lse = flex.call(q, k, v, score_mod, block_mask, scale, lse=True,
                         compile=compile)  # lse (B, H, T) fp32
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
    e = band_scores(q, k, start, half, band_block).to(acc) * scale + qa[..., 1: R - 1].to(acc)
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
        tail_mask = flex.block_mask(right_tail_mod(allowed, offset, clip), B, T, S, q.device,
                                    ("relpos_right_tail", start, kmax, kpm is None),
                                    (kpm, attn_mask))
        # only the lse is used: a narrow zero value keeps the p @ v part of the call small
        v0 = v.new_zeros(B, H, S, min(D, 16))
        _, lse_r = flex.call(q, k, v0, score_mod, tail_mask, scale, lse=True, compile=compile)
        lse_r = lse_r.to(acc)
        has_tail = torch.isfinite(lse_r) & has_key
        lse_r = torch.where(has_tail, lse_r, lse_safe)
        mass_right = torch.where(has_tail, torch.exp(lse_r - lse_safe), mass_right)
    mass_left = has_key.to(acc) - mass_right - band.sum(-1)

    table = rel_values.to(acc)
    extra = (torch.matmul(band, table[1: R - 1])
             + mass_left[..., None] * table[0] + mass_right[..., None] * table[R - 1])
    return out + extra.to(out.dtype)


def clipped_score_mod(qa: Tensor, offset: Tensor, kmax: Tensor):
    """``score + qa[b, h, i, clip(j - i - offset, k) + k]``."""
    def score_mod(score, b, h, i, j):
        return score + qa[b, h, i, torch.clamp(j - i - offset, -kmax, kmax) + kmax]

    return score_mod


def clipped_add_score_mod(qa: Tensor, add: Tensor, offset: Tensor, kmax: Tensor):
    """:func:`clipped_score_mod` plus fairseq's additive mask ``add[i, j]``."""
    def score_mod(score, b, h, i, j):
        return score + qa[b, h, i, torch.clamp(j - i - offset, -kmax, kmax) + kmax] + add[i, j]

    return score_mod


def right_tail_mod(allowed, offset: Tensor, kmax: Tensor):
    """``mask_mod``: ``allowed`` and the key at least k to the right of the query."""
    def mask_mod(b, h, i, j):
        return allowed(b, h, i, j) & (j - i - offset >= kmax)

    return mask_mod
