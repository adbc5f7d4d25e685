"""The float64 references of the position methods that declare distance terms, one per
method, shared by every test of their paths (not a test module).

Each picks the term of every (query i, key j) with an explicit loop over the pairs, written
from the paper, then takes a dense float64 softmax over the keys a query may see (no padding
key; with ``causal``, none to its right; with ``attn_mask``, fairseq's float or boolean
mask), so that autograd gives the reference gradients of q, k, v and the tables. Queries sit
at positions ``start .. start + T - 1``, keys at ``0 .. S - 1``. A query without any key
outputs 0 (the core's convention). Each returns ``(out (B, H, T, D), probs (B, H, T, S))``.
"""

import torch

from position_helpers import t5_bucket


def shaw64(q, k, v, wk, wv, kmax, scale, kpm=None, start=0, causal=False, attn_mask=None):
    """Shaw, Uszkoreit and Vaswani (2018), eq. 3-4: ``e_ij = scale q_i . (k_j + w_K[clip(j - i)])``,
    ``z_i = sum_j p_ij (v_j + w_V[clip(j - i)])``, ``clip(x) = max(-k, min(k, x))``; ``wv``
    None: keys only."""
    T, S = q.size(2), k.size(2)
    row = torch.empty(T, S, dtype=torch.long)
    for i in range(T):
        for j in range(S):
            row[i, j] = max(-kmax, min(kmax, j - (start + i))) + kmax
    scores = (torch.einsum("bhid,bhjd->bhij", q, k) + torch.einsum("bhid,ijd->bhij", q, wk[row])) * scale
    p = _softmax(scores, kpm, start, causal, attn_mask)
    out = p @ v
    if wv is not None:
        out = out + torch.einsum("bhij,ijd->bhid", p, wv[row])
    return out, p


def alibi64(q, k, v, slopes, scale, kpm=None, start=0, causal=False, attn_mask=None):
    """Press, Smith and Lewis (2022): ``e_ij = scale q_i . k_j - m_h |i - j|`` (the encoder's
    symmetric form; under the causal mask the paper's ``-m_h (i - j)``)."""
    H, T, S = q.size(1), q.size(2), k.size(2)
    penalty = torch.empty(H, T, S, dtype=torch.float64)
    for h in range(H):
        for i in range(T):
            for j in range(S):
                penalty[h, i, j] = -slopes[h] * abs(start + i - j)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * scale + penalty
    p = _softmax(scores, kpm, start, causal, attn_mask)
    return p @ v, p


def t5bias64(q, k, v, table, buckets, max_distance, scale, kpm=None, start=0, causal=False,
             attn_mask=None):
    """Raffel et al. (2020): ``e_ij = scale q_i . k_j + b[bucket(j - i), h]``, T5's buckets
    (``position_helpers.t5_bucket``, written out), bidirectional unless ``causal``."""
    T, S = q.size(2), k.size(2)
    bucket = torch.empty(T, S, dtype=torch.long)
    for i in range(T):
        for j in range(S):
            bucket[i, j] = t5_bucket(j - (start + i), not causal, buckets, max_distance)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * scale + table[bucket].permute(2, 0, 1)
    p = _softmax(scores, kpm, start, causal, attn_mask)
    return p @ v, p


def _softmax(scores, kpm, start, causal, attn_mask):
    """A dense softmax over the allowed keys; zeros for a query without any."""
    B, _, T, S = scores.shape
    allowed = torch.ones(B, 1, T, S, dtype=torch.bool)
    if kpm is not None:
        allowed = allowed & ~kpm[:, None, None, :]
    if causal:
        allowed = allowed & (torch.arange(S)[None, :] <= start + torch.arange(T)[:, None])
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            allowed = allowed & ~attn_mask
        else:
            allowed = allowed & (attn_mask > float("-inf"))
            scores = scores + attn_mask.masked_fill(attn_mask == float("-inf"), 0.0)
    has_key = allowed.any(-1, keepdim=True)
    # a row without keys: softmax over zeros, then zeroed (no -inf - -inf in the reference)
    scores = torch.where(allowed, scores, torch.where(has_key, float("-inf"), 0.0))
    return torch.softmax(scores, -1) * has_key
