"""The Triton flash kernels of the distance terms: FlashAttention-2's forward (online softmax
over key tiles, the log-sum-exp saved) and its backward (one kernel per key tile for dk, dv
and the bias table's partial sums, one per query tile for dq and dQA), the terms added per
tile: a bias of the distance (t5bias's table by bucket, alibi's slopes), Shaw's key term
``QA[i, clip(j - i) + k]`` with ``QA = scale q w_K^T`` (B H, T, 2k + 1) computed outside
(one matmul; torch carries dQA to q and w_K) and Shaw's value term (PB, below). Launched by :mod:`.triton_launch`, which holds
the layout; this module imports triton and is imported only when a call runs the kernels.

Layout: q (B H, T, D), k and v (B H, S, D), contiguous; queries at positions
``start .. start + T - 1`` (``start = S - T``), keys at ``0 .. S - 1``; the padding (B, S)
uint8, 1 = pad. ``BIAS`` 0: none; 1: ``table[bucket[j - i + S - 1], h]`` with the bucket of
every distance precomputed (S + T - 1 int32, by the declaration's own bucket function) and
the (N, H) table; 2: ``-slopes[h] |j - i|``. ``KEYS``: Shaw's key term, dQA (B H, T, R)
written by the query tile that owns the rows (per table row, only the rows the key tile
spans: a tile wholly beyond the clip adds one row sum to its edge row). ``VALUES``: Shaw's
value term, PB (B H, T, R) the probability mass per table row, from which the caller adds
``PB a_V`` (one matmul); the backward reads ``dPB = dO a_V^T`` gathered by distance into dP
(``DELTA`` then includes ``rowsum(PB * dPB)``). A row without any allowed key gets output 0
and log-sum-exp +inf (every recomputed probability 0: zero gradients), the core's rule.

The table's gradient, dS summed per (head, bucket), is deterministic: each key-tile program
sums its dS per bucket into its own row of a buffer (B H, key tiles, NB) that torch sums
(no atomics). Per query tile, only the buckets the tile spans are visited: a tile wholly
past the last bucket boundary (|j - i| >= max distance) spans one bucket and adds one sum.
"""

import triton
import triton.language as tl


@triton.jit
def _distance_tile(offs_m, offs_n, T, S, start):
    """(j - i) per pair of the tile, and which pairs are inside (T, S)."""
    dist = offs_n[None, :] - (start + offs_m)[:, None]
    inside = (offs_m < T)[:, None] & (offs_n < S)[None, :]
    return dist, inside


@triton.jit
def _buckets(dist, inside, S, BUCKET, BIAS: tl.constexpr):
    """The bucket of each pair (``BIAS`` 1), else zeros."""
    if BIAS == 1:
        return tl.load(BUCKET + dist + S - 1, mask=inside, other=0)
    else:
        return tl.zeros_like(dist)


@triton.jit
def _rows(dist, clip):
    """Shaw's table row of each pair: ``clip(j - i, k) + k``."""
    return tl.minimum(tl.maximum(dist, -clip), clip) + clip


@triton.jit
def _add_terms(s, dist, inside, bk, offs_m, offs_n, b, h, bh, T, S, H, PAD, TABLE, SLOPES, QA, R, clip,
               BIAS: tl.constexpr, KEYS: tl.constexpr, CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr):
    """The tile's scores plus the bias and Shaw's key term ``QA[i, clip(j - i) + k]``; -inf
    where a key is outside S, padded or (causal) right of the query."""
    if KEYS:
        s += tl.load(QA + bh * T * R + offs_m[:, None] * R + _rows(dist, clip), mask=inside, other=0.0).to(s.dtype)
    if BIAS == 1:
        s += tl.load(TABLE + bk * H + h, mask=inside, other=0.0).to(s.dtype)
    if BIAS == 2:
        s -= tl.load(SLOPES + h).to(s.dtype) * tl.abs(dist).to(s.dtype)
    valid = (offs_n < S)[None, :]
    if HAS_PAD:
        pad = tl.load(PAD + b * S + offs_n, mask=offs_n < S, other=1)
        valid = valid & (pad == 0)[None, :]
    if CAUSAL:
        valid = valid & (dist <= 0)
    return tl.where(valid, s, float("-inf"))


@triton.jit
def _tile_scores(q, k, scale, offs_m, offs_n, b, h, bh, T, S, H, start, PAD, BUCKET, TABLE, SLOPES, QA, R, clip,
                 BIAS: tl.constexpr, KEYS: tl.constexpr, CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr,
                 ACC: tl.constexpr, PRECISION: tl.constexpr):
    """One tile's scores as every kernel computes them (forward, backward_kv, backward_q): scale q k^T
    plus the terms, masked (:func:`_add_terms`); with the pairs' distances, which are inside (T, S)
    and their buckets, for the terms' gradients."""
    s = tl.dot(q, tl.trans(k), out_dtype=ACC, input_precision=PRECISION) * scale
    dist, inside = _distance_tile(offs_m, offs_n, T, S, start)
    bk = _buckets(dist, inside, S, BUCKET, BIAS)
    s = _add_terms(s, dist, inside, bk, offs_m, offs_n, b, h, bh, T, S, H, PAD, TABLE, SLOPES, QA, R, clip,
                   BIAS, KEYS, CAUSAL, HAS_PAD)
    return s, dist, inside, bk


@triton.jit
def _tile_ds(p, do, v, delta, dist, inside, offs_m, bh, T, R, clip, DPB, VALUES: tl.constexpr,
             ACC: tl.constexpr, PRECISION: tl.constexpr):
    """dS of one tile (both backward kernels): P (dP - delta), where dP = dO v^T gains Shaw's value
    term dO_i . a_V[clip(j - i)], gathered from dPB = dO a_V^T."""
    dp = tl.dot(do, tl.trans(v), out_dtype=ACC, input_precision=PRECISION)
    if VALUES:
        dp += tl.load(DPB + bh * T * R + offs_m[:, None] * R + _rows(dist, clip), mask=inside, other=0.0)
    return p * (dp - delta[:, None])


@triton.jit
def forward(Q, K, V, O, LSE, PB, PAD, BUCKET, TABLE, SLOPES, QA, scale, T, S, H, D, start, R, clip,
            BIAS: tl.constexpr, KEYS: tl.constexpr, VALUES: tl.constexpr, CAUSAL: tl.constexpr,
            HAS_PAD: tl.constexpr, RB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
            BLOCK_D: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """One query tile: the output (without Shaw's value term), the log-sum-exp and (``VALUES``)
    PB (B H, T, R), each row's probability mass per clipped distance, accumulated beside the
    output and rescaled with it (the caller adds ``PB a_V``)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q_mask = (offs_m < T)[:, None] & (offs_d < D)[None, :]
    q = tl.load(Q + bh * T * D + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), ACC)
    l_i = tl.zeros((BLOCK_M,), ACC)
    acc = tl.zeros((BLOCK_M, BLOCK_D), ACC)
    pb = tl.zeros((BLOCK_M, RB), ACC)
    hi = S
    if CAUSAL:
        hi = tl.minimum(S, start + (pid_m + 1) * BLOCK_M)
    for n0 in range(0, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        kv_mask = (offs_n < S)[:, None] & (offs_d < D)[None, :]
        kv_off = bh * S * D + offs_n[:, None] * D + offs_d[None, :]
        k = tl.load(K + kv_off, mask=kv_mask, other=0.0)
        s, dist, inside, bk = _tile_scores(q, k, scale, offs_m, offs_n, b, h, bh, T, S, H, start, PAD, BUCKET, TABLE,
                                           SLOPES, QA, R, clip, BIAS, KEYS, CAUSAL, HAS_PAD, ACC, PRECISION)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key yet: exp(-inf - 0) = 0
        p = tl.exp(s - m_use[:, None])
        alpha = tl.exp(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + kv_off, mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, out_dtype=ACC, input_precision=PRECISION)
        if VALUES:
            pb = _per_row(pb * alpha[:, None], p, _rows(dist, clip), inside, RB)
        m_i = m_new
    has = l_i > 0
    l_safe = tl.where(has, l_i, 1.0)
    out = acc / l_safe[:, None]  # 0 for a row without keys (acc stayed 0)
    lse = tl.where(has, m_i + tl.log(l_safe), float("inf"))
    if VALUES:
        cols = tl.arange(0, RB)
        tl.store(PB + bh * T * R + offs_m[:, None] * R + cols[None, :], pb / l_safe[:, None],
                 mask=(offs_m < T)[:, None] & (cols < R)[None, :])
    tl.store(O + bh * T * D + offs_m[:, None] * D + offs_d[None, :], out.to(O.dtype.element_ty), mask=q_mask)
    tl.store(LSE + bh * T + offs_m, lse, mask=offs_m < T)


@triton.jit
def _per_bucket(acc_t, ds, bk, inside, NB: tl.constexpr):
    """``acc_t[n] += sum of ds over the pairs of bucket n``, for the buckets the tile spans."""
    lo = tl.min(tl.where(inside, bk, NB))
    hi = tl.max(tl.where(inside, bk, -1))
    bins = tl.arange(0, NB)
    for n in range(lo, hi + 1):
        part = tl.sum(tl.sum(tl.where(inside & (bk == n), ds, 0.0), 1), 0)
        acc_t += tl.where(bins == n, part, 0.0)
    return acc_t


@triton.jit
def _per_row(dqa, ds, rows, inside, RB: tl.constexpr):
    """``dqa[i, r] += sum of ds[i, j] over the keys j of table row r``, for the rows the tile
    spans (a tile wholly beyond the clip: one row sum into its edge row)."""
    lo = tl.min(tl.where(inside, rows, RB))
    hi = tl.max(tl.where(inside, rows, -1))
    cols = tl.arange(0, RB)
    for r in range(lo, hi + 1):
        part = tl.sum(tl.where(inside & (rows == r), ds, 0.0), 1)
        dqa += tl.where(cols[None, :] == r, part[:, None], 0.0)
    return dqa


@triton.jit
def backward_kv(Q, K, V, DO, LSE, DELTA, DK, DV, DTABLE, PAD, BUCKET, TABLE, SLOPES, QA, DPB,
                scale, T, S, H, D, start, R, clip,
                BIAS: tl.constexpr, KEYS: tl.constexpr, VALUES: tl.constexpr, CAUSAL: tl.constexpr,
                HAS_PAD: tl.constexpr, TABLE_GRAD: tl.constexpr, NB: tl.constexpr, RB: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                ACC: tl.constexpr, PRECISION: tl.constexpr):
    """One key tile: dk, dv over every query tile that sees it, and (``TABLE_GRAD``) its dS
    summed per bucket into its row of DTABLE (B H, key tiles, NB)."""
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    kv_mask = (offs_n < S)[:, None] & (offs_d < D)[None, :]
    kv_off = bh * S * D + offs_n[:, None] * D + offs_d[None, :]
    k = tl.load(K + kv_off, mask=kv_mask, other=0.0)
    v = tl.load(V + kv_off, mask=kv_mask, other=0.0)
    dk = tl.zeros((BLOCK_N, BLOCK_D), ACC)
    dv = tl.zeros((BLOCK_N, BLOCK_D), ACC)
    acc_t = tl.zeros((NB,), ACC)
    lo = 0
    if CAUSAL:  # queries left of the tile's first key see none of it
        lo = (tl.maximum(0, pid_n * BLOCK_N - start) // BLOCK_M) * BLOCK_M
    for m0 in range(lo, T, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        q_mask = (offs_m < T)[:, None] & (offs_d < D)[None, :]
        q_off = bh * T * D + offs_m[:, None] * D + offs_d[None, :]
        q = tl.load(Q + q_off, mask=q_mask, other=0.0)
        do = tl.load(DO + q_off, mask=q_mask, other=0.0)
        lse = tl.load(LSE + bh * T + offs_m, mask=offs_m < T, other=float("inf"))
        delta = tl.load(DELTA + bh * T + offs_m, mask=offs_m < T, other=0.0)
        s, dist, inside, bk = _tile_scores(q, k, scale, offs_m, offs_n, b, h, bh, T, S, H, start, PAD, BUCKET, TABLE,
                                           SLOPES, QA, R, clip, BIAS, KEYS, CAUSAL, HAS_PAD, ACC, PRECISION)
        p = tl.exp(s - lse[:, None])  # 0 where masked (-inf) or the row has no key (lse +inf)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, out_dtype=ACC, input_precision=PRECISION)
        ds = _tile_ds(p, do, v, delta, dist, inside, offs_m, bh, T, R, clip, DPB, VALUES, ACC, PRECISION)
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, out_dtype=ACC, input_precision=PRECISION)
        if TABLE_GRAD:
            acc_t = _per_bucket(acc_t, ds, bk, inside, NB)
    tl.store(DK + kv_off, (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + kv_off, dv.to(DV.dtype.element_ty), mask=kv_mask)
    if TABLE_GRAD:
        tiles = tl.num_programs(0)
        tl.store(DTABLE + (bh * tiles + pid_n) * NB + tl.arange(0, NB), acc_t)


@triton.jit
def backward_q(Q, K, V, DO, LSE, DELTA, DQ, DQA, PAD, BUCKET, TABLE, SLOPES, QA, DPB,
               scale, T, S, H, D, start, R, clip,
               BIAS: tl.constexpr, KEYS: tl.constexpr, VALUES: tl.constexpr, CAUSAL: tl.constexpr,
               HAS_PAD: tl.constexpr, RB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_D: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr):
    """One query tile: dq over every key tile it sees, and (``KEYS``) dQA, its dS summed per
    table row (RB columns, R of them stored)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q_mask = (offs_m < T)[:, None] & (offs_d < D)[None, :]
    q_off = bh * T * D + offs_m[:, None] * D + offs_d[None, :]
    q = tl.load(Q + q_off, mask=q_mask, other=0.0)
    do = tl.load(DO + q_off, mask=q_mask, other=0.0)
    lse = tl.load(LSE + bh * T + offs_m, mask=offs_m < T, other=float("inf"))
    delta = tl.load(DELTA + bh * T + offs_m, mask=offs_m < T, other=0.0)
    dq = tl.zeros((BLOCK_M, BLOCK_D), ACC)
    dqa = tl.zeros((BLOCK_M, RB), ACC)
    hi = S
    if CAUSAL:
        hi = tl.minimum(S, start + (pid_m + 1) * BLOCK_M)
    for n0 in range(0, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        kv_mask = (offs_n < S)[:, None] & (offs_d < D)[None, :]
        kv_off = bh * S * D + offs_n[:, None] * D + offs_d[None, :]
        k = tl.load(K + kv_off, mask=kv_mask, other=0.0)
        v = tl.load(V + kv_off, mask=kv_mask, other=0.0)
        s, dist, inside, bk = _tile_scores(q, k, scale, offs_m, offs_n, b, h, bh, T, S, H, start, PAD, BUCKET, TABLE,
                                           SLOPES, QA, R, clip, BIAS, KEYS, CAUSAL, HAS_PAD, ACC, PRECISION)
        p = tl.exp(s - lse[:, None])
        ds = _tile_ds(p, do, v, delta, dist, inside, offs_m, bh, T, R, clip, DPB, VALUES, ACC, PRECISION)
        dq += tl.dot(ds.to(k.dtype), k, out_dtype=ACC, input_precision=PRECISION)
        if KEYS:
            dqa = _per_row(dqa, ds, _rows(dist, clip), inside, RB)
    tl.store(DQ + q_off, (dq * scale).to(DQ.dtype.element_ty), mask=q_mask)
    if KEYS:
        cols = tl.arange(0, RB)
        tl.store(DQA + bh * T * R + offs_m[:, None] * R + cols[None, :], dqa,
                 mask=(offs_m < T)[:, None] & (cols < R)[None, :])
