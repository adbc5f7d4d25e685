"""The Triton flash kernels of the distance terms: FlashAttention-2's forward (online softmax
over key tiles, the log-sum-exp saved) and its backward (``backward_delta``: each row's delta;
``backward_q``: dq, dQA, the tables' gradients; ``backward_kv``: dk, dv, keys as the tile's rows
as in the tutorial), with the terms added per tile: a bias of the distance (t5bias's table per
distance, alibi's slopes), Shaw's key term ``QA[i, clip(j - i) + k]`` (``QA = scale q w_K^T``,
made by the forward for its rows and kept for the backward; its shares of dq and of ``d w_K``
are made by ``backward_q``) and Shaw's value term (PB, below; ``PB a_V`` added by the forward,
``dPB = dO a_V^T`` and ``d a_V``'s shares made by ``backward_delta``). The products with
Shaw's float32 tables are dots of float32 operands: for fp16 / bf16 inputs the operand that is
not q or dO (exact in tf32) is split in two tf32 parts (:func:`_tf32_parts`), float32's
precision in two tensor-core dots. Launched by :mod:`.triton_launch`, which holds the layout;
this module imports triton and is imported only when a call runs the kernels.

Every score is in base-2 units: ``x = s q.k log2(e) + term log2(e)`` and ``p = exp2(x - m)``
(the caller passes the terms already multiplied by log2(e); the log-sum-exp is kept in base
2). The keys a query tile sees are split in three stages, as the tutorial's causal stages are:

* far-left tiles, every pair at ``j - i <= -WL``, and far-right tiles, every pair at
  ``j - i >= WR``: the term is a per-row constant plus (alibi) a per-column one, added to
  the row's offset and to the column vector the scale's FMA adds anyway (t5bias's edge
  bucket; Shaw's edge row of QA, whose PB and dQA share is the tile's row sum; alibi's
  ``-m |j - i| = -m (i - i0) + m (j - i0)`` left, the opposite right): no per-pair work;
* band tiles, between: the term per pair, read once from a (heads, distances) row or a
  (rows, 2k + 1) row (QA, dPB), and PB / dQA binned by distance with ``tl.gather`` (each
  interior bin of a row is one key). No loop inside a main loop. t5bias's row is the table's
  value per distance in the table's dtype (scaled by log2(e) here), zero-padded, in 8 copies
  each starting one distance later: a tile row's keys are consecutive distances, so each row
  reads whole aligned vectors from the copy that aligns its first key, unmasked.

The padding (and the key length) enters as a column vector ``KB`` (0 or -inf) folded into the
scale's FMA; with ``SHIFT`` (a length no tile divides) the last tile of a loop starts at the length less its
width, its loads whole, what it shares with the tile before masked in a vector (:func:`_shift`: the keys'
column, or in ``backward_kv`` the queries' log-sum-exp); the causal mask only in band tiles (the far-right stage is empty then). A row
without any allowed key gets output 0 and log-sum-exp +inf (every recomputed probability 0:
zero gradients), the core's rule. q, k, v and dO are read through their strides ((B, H, T,
D) views, the last dimension contiguous); B H is the grid's first axis.

t5bias's table gradient is deterministic: ``backward_q`` sums dS per distance in its band
tiles (a skewed gather: the tile's diagonals, those that wrap around its right edge apart;
the wrapped ones have the previous tile's distances and are stored with its unwrapped ones,
carried to the next tile) and writes them into a row of its own (no cell is written twice),
distance ``j - i`` at column ``j - i + WOFF`` (the launcher sets ``WOFF`` and the row's width
``NDIST`` to the span the programs' band tiles write, at most ``-WL - 2 BLOCK_N .. WR + BLOCK_M +
BLOCK_N``: the same distances in every program, whatever the length), and the far tiles' sums
into two cells; torch adds them up per bucket (a one-hot matmul).
"""

import triton
import triton.language as tl


@triton.jit
def _load_rows(ptrs, offs, n, offs_d, D, EVEN: tl.constexpr, EVEN_D: tl.constexpr):
    """A (rows, BLOCK_D) tile, masked only where the rows or the head may run past their ends."""
    if EVEN:
        if EVEN_D:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=(offs_d < D)[None, :], other=0.0)
    else:
        x = tl.load(ptrs, mask=(offs < n)[:, None] & (offs_d < D)[None, :], other=0.0)
    return x


@triton.jit
def _tile_rows(PTR, off, n0, stride, offs, n, offs_d, D, EVEN: tl.constexpr, EVEN_D: tl.constexpr,
               BLOCK: tl.constexpr, TILE_BASE: tl.constexpr):
    """The (BLOCK, BLOCK_D) tile of rows ``n0 ..`` (offs) of a (rows, D) matrix at ``PTR + off`` with row
    stride ``stride``; ``TILE_BASE``: addressed from the tile's scalar base and loop-invariant offsets
    (fewer address instructions in some loops, more registers in others)."""
    if TILE_BASE:
        x = _load_rows((PTR + off + n0 * stride) + tl.arange(0, BLOCK)[:, None] * stride + offs_d[None, :], offs, n,
                       offs_d, D, EVEN, EVEN_D)
    else:
        x = _load_rows(PTR + off + offs[:, None] * stride + offs_d[None, :], offs, n, offs_d, D, EVEN, EVEN_D)
    return x


@triton.jit
def _row_vector(ptrs, offs, n, other, EVEN: tl.constexpr):
    """A per-row vector, masked only where the rows may run past their end."""
    if EVEN:
        x = tl.load(ptrs)
    else:
        x = tl.load(ptrs, mask=offs < n, other=other)
    return x


@triton.jit
def _stages(i0, lo, hi, WL, WR, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
            CAUSAL: tl.constexpr):
    """The key bounds of a query tile's stages (rows ``i0 .. i0 + BLOCK_M - 1``, keys
    ``lo .. hi - 1``, lo a multiple of BLOCK_N): far-left ``[lo, fl)``, band ``[fl, fr)``,
    far-right ``[fr, hi)``."""
    if SPLIT:
        fl = tl.minimum(tl.maximum(lo, (tl.maximum(i0 - WL + 1, 0) // BLOCK_N) * BLOCK_N), hi)
        fr = tl.maximum(tl.minimum(hi, ((i0 + BLOCK_M - 1 + WR + BLOCK_N - 1) // BLOCK_N) * BLOCK_N), fl)
        if CAUSAL:
            fr = hi
    else:
        fl = hi
        fr = hi
    return fl, fr


@triton.jit
def _q_stages(n0, start, m_lo, T, WL, WR, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
              CAUSAL: tl.constexpr):
    """The query bounds of a key tile's stages (keys ``n0 .. n0 + BLOCK_N - 1``, query tiles
    from ``m_lo``): far-right ``[m_lo, a)`` (keys right of the queries), band ``[a, c)``,
    far-left ``[c, T)``."""
    if SPLIT:
        a = tl.minimum(tl.maximum(m_lo, (tl.maximum(n0 + 1 - WR - start, 0) // BLOCK_M) * BLOCK_M), T)
        c = tl.maximum(tl.minimum(T, ((tl.maximum(n0 + BLOCK_N - 1 + WL - start, 0) + BLOCK_M - 1) // BLOCK_M)
                                  * BLOCK_M), a)
        if CAUSAL:
            a = m_lo
    else:
        a = m_lo
        c = m_lo
    return a, c


@triton.jit
def _q_band(i0, hi, WL, WR, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A query tile's band ``[fl, fr)`` (keys ``< hi``) as whole BLOCK_N tiles from the multiple of 16 at or left of
    its first key (``j - i > -WL``) to past its last (``j - i < WR``), moved left where it would pass ``hi`` (its
    tiles stay whole: a length no tile divides leaves the partial tile to the far tiles; only a band wider than
    ``hi`` ends in one). From 16, not BLOCK_N: at 64 rows and k = 16 the band is 94 keys, 3 tiles of 32 from a
    multiple of 16, 4 from one of 32."""
    lo = (tl.maximum(i0 - WL + 1, 0) // 16) * 16
    width = ((tl.minimum(i0 + BLOCK_M - 1 + WR, hi) - lo + BLOCK_N - 1) // BLOCK_N) * BLOCK_N
    fl = tl.maximum(tl.minimum(lo, hi - width), 0)
    return fl, tl.minimum(fl + width, hi)


@triton.jit
def _whole(lo, hi, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    """Where a loop's whole tiles from ``lo`` end (``SHIFT``: the partial tile at ``hi`` runs after the loop,
    moved back, :func:`_shift`; the loop then needs no shift, no kept keys and no masked load), else ``hi``."""
    if SHIFT:
        return lo + ((hi - lo) // BLOCK) * BLOCK
    return hi


@triton.jit
def _shift(n0, S, keep_lo, keep_hi, KEEP: tl.constexpr, BLOCK_N: tl.constexpr):
    """A key tile moved back to end at S where it would pass it (S at least BLOCK_N: the last tile of a length no
    tile divides), so that its loads are whole and unmasked; the keys it shares with the tile before it are
    masked (kept from the tile's first key as it was). Returns the tile's first key and the kept keys' bounds."""
    lo = tl.maximum(keep_lo, n0)
    hi = S
    if KEEP:
        hi = keep_hi
    return tl.minimum(n0, S - BLOCK_N), lo, hi


@triton.jit
def _offsets(d, BLOCK: tl.constexpr, ACC: tl.constexpr):
    """``d + arange(BLOCK)`` in ACC: the arange converted once (loop-invariant), the scalar
    added per tile (no per-element integer conversion)."""
    return tl.arange(0, BLOCK).to(ACC) + d


@triton.jit
def _columns(offs_n, n0, b, S, i0, slope2, KB, HAS_PAD: tl.constexpr, BIAS: tl.constexpr, KIND: tl.constexpr,
             ACC: tl.constexpr, EVEN_N: tl.constexpr, BLOCK_N: tl.constexpr, TILE_BASE: tl.constexpr = False):
    """The tile's column vector: 0 or -inf (padding, past S), plus alibi's column part in
    far tiles (KIND 0 far-left, 1 band, 2 far-right)."""
    if HAS_PAD:
        if EVEN_N:
            if TILE_BASE:  # the tile's scalar base, loop-invariant offsets (fewer address instructions where set)
                col = tl.load((KB + b * S + n0) + tl.arange(0, BLOCK_N)).to(ACC)
            else:
                col = tl.load(KB + b * S + offs_n).to(ACC)
        else:
            col = tl.load(KB + b * S + offs_n, mask=offs_n < S, other=float("-inf")).to(ACC)
    else:
        col = tl.where(offs_n < S, 0.0, float("-inf")).to(ACC)
    if BIAS == 2:
        if KIND == 0:
            col += slope2 * _offsets(n0 - i0, BLOCK_N, ACC)
        if KIND == 2:
            col -= slope2 * _offsets(n0 - i0, BLOCK_N, ACC)
    return col


@triton.jit
def _rows_term(offs_m, i0, h, T, S, WL, WR, slope2, BIAS2, QA2, qa_row, R, KIND: tl.constexpr, BIAS: tl.constexpr,
               KEYS: tl.constexpr, ACC: tl.constexpr):
    """The far tiles' per-row term (KIND 0 far-left, 2 far-right)."""
    row = tl.zeros(offs_m.shape, ACC)
    if BIAS == 2:
        if KIND == 0:
            row -= slope2 * (offs_m - i0 + (S - T)).to(ACC)
        else:
            row += slope2 * (offs_m - i0 + (S - T)).to(ACC)
    if BIAS == 1:  # BIAS2 at distance 0 of the head's row; -WL and WR have the edge buckets
        if KIND == 0:
            row += tl.load(BIAS2 - WL).to(ACC) * 1.4426950408889634
        else:
            row += tl.load(BIAS2 + WR).to(ACC) * 1.4426950408889634
    if KEYS:
        if KIND == 0:
            row += tl.load(QA2 + qa_row, mask=offs_m < T, other=0.0).to(ACC)
        else:
            row += tl.load(QA2 + qa_row + R - 1, mask=offs_m < T, other=0.0).to(ACC)
    return row


@triton.jit
def _band(x, dist, inside, n0, i0, h, S, first0, slope2, BIAS2, QA2, qa_rows, clip, BIAS: tl.constexpr,
          KEYS: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
          TRANS: tl.constexpr = False):
    """A band tile's per-pair terms and the causal mask (``TRANS``: keys as rows, queries
    as columns)."""
    if BIAS == 2:  # -m |j - i| from two float position vectors (no integer tile, no conversion per pair)
        keys = _offsets(n0 - i0, BLOCK_N, x.dtype)
        rows = tl.arange(0, BLOCK_M).to(x.dtype)
        if TRANS:
            x -= slope2 * tl.abs(keys[:, None] - rows[None, :])
        elif CAUSAL:  # the kept pairs have j <= i: -m |j - i| = m (j - i)
            x += slope2 * dist.to(x.dtype)
        else:
            x -= slope2 * tl.abs(keys[None, :] - rows[:, None])
    if BIAS == 1:  # BIAS2: distance 0 in the head's first of 8 copies (copy c at c BROW holds the row from
        # distance c on), padded with zeros: no mask; each tile row reads the copy that aligns its start
        # (first0: :func:`_bias_first`)
        first = tl.multiple_of(first0 + (n0 - i0), 8)
        if TRANS:
            x += tl.load(BIAS2 + first[None, :] + tl.arange(0, BLOCK_N)[:, None]).to(x.dtype) * 1.4426950408889634
        else:
            x += tl.load(BIAS2 + first[:, None] + tl.arange(0, BLOCK_N)[None, :]).to(x.dtype) * 1.4426950408889634
    if KEYS:
        r = tl.minimum(tl.maximum(dist + clip, 0), 2 * clip)
        if TRANS:
            x += tl.load(QA2 + qa_rows[None, :] + r, mask=inside, other=0.0).to(x.dtype)
        else:
            x += tl.load(QA2 + qa_rows[:, None] + r, mask=inside, other=0.0).to(x.dtype)
    if CAUSAL:
        x = tl.where(dist <= 0, x, float("-inf"))
    return x


@triton.jit
def _bias_first(phase, BROW, BLOCK_M: tl.constexpr):
    """Where each of a band tile's rows (``TRANS``: columns) starts reading t5bias's copies
    (:func:`_band`), less the tile's ``n0 - i0``: the copy that aligns the row's first key is
    ``(n0 - i0 - row) mod 8``, the same in every band tile of a program (``phase``: ``n0 - i0``
    of any of them), so this is computed once, outside the loops."""
    u = phase - tl.arange(0, BLOCK_M)
    c = u & 7
    return c * BROW - tl.arange(0, BLOCK_M) - c


@triton.jit
def _bins(v, pos_i, n0, clip, RI: tl.constexpr, BLOCK_N: tl.constexpr):
    """``out[i, r] = v[i, j]`` for the key j at ``j - i = r + 1 - clip`` when it is in this tile,
    else 0: a tile's share of the interior of a (rows, 2k + 1) table (each interior bin of a row
    is one key). Columns r >= 2 clip - 1 hold right-edge keys: every reader masks them (the
    table's rows past R - 1 are zeros, the stores stop at R - 1) or overwrites column R - 2."""
    r = tl.arange(0, RI)
    jl = pos_i[:, None] + r[None, :] + 1 - clip - n0
    jc = tl.minimum(tl.maximum(jl, 0), BLOCK_N - 1)
    return tl.where(jc == jl, tl.gather(v, jc, 1), 0.0)


@triton.jit
def _store_bins(PTR, rows, inner, left, right, R, T, offs_m, RI: tl.constexpr):
    """A (rows, R) table: ``left`` in column 0, ``inner`` in 1 .. R - 2, ``right`` in R - 1."""
    r = tl.arange(0, RI)[None, :]
    tl.store(PTR + rows[:, None] + 1 + r, inner, mask=(offs_m < T)[:, None] & (r < R - 2))
    tl.store(PTR + rows, left, mask=offs_m < T)
    tl.store(PTR + rows + R - 1, right, mask=offs_m < T)


@triton.jit
def _tf32_parts(x):
    """float32 x as hi + lo, both exact in tf32 but for lo's rounding (to nearest): a product with
    an operand exact in tf32 (fp16 / bf16 values) is then two tf32 dots within float32's precision
    (tf32x3 would split both operands: three dots)."""
    hi = (x.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)
    lo = (((x - hi).to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return hi, lo


@triton.jit
def _key_products(q, WK, QA2, qa_rows, offs_m, offs_d, T, D, R, qk_scale, RI: tl.constexpr, ACC: tl.constexpr,
                  PRECISION: tl.constexpr, TABLE_TF32: tl.constexpr, TABLE_NATIVE: tl.constexpr):
    """The rows' ``QA log2(e) = scale log2(e) q w_K^T`` (WK: Shaw's key table, (R, D); ``qk_scale``:
    scale log2(e), applied after the products), stored into QA2 (the band tiles read it back after
    the barrier), the edge columns too (read back as the far tiles' row terms). ``TABLE_NATIVE``
    (the table in q's dtype, fp16 / bf16): one dot of q and the table as they are (exact products,
    float32 sums) for columns 1 .. R - 1 (the right edge in the interior tile's spare column:
    RI >= 2k), column 0 as a row sum; else WK is in the accumulator's dtype: the interior columns 1 .. R - 2 as one dot of
    float32 operands (``TABLE_TF32``, a table in fp16 / bf16: q and the table are exact in tf32,
    one tf32 dot is exact; else at ``PRECISION``, tf32x3 splitting the table alone), the edge
    columns as row sums."""
    r = tl.arange(0, RI)
    d_ok = offs_d < D
    qf = q.to(ACC)
    left = tl.sum(qf * tl.load(WK + offs_d, mask=d_ok, other=0.0).to(ACC)[None, :], 1) * qk_scale
    if TABLE_NATIVE:
        w_in = tl.load(WK + (1 + r)[None, :] * D + offs_d[:, None], mask=(r < R - 1)[None, :] & d_ok[:, None],
                       other=0.0)
        qa = tl.dot(q, w_in, out_dtype=ACC) * qk_scale
        tl.store(QA2 + qa_rows[:, None] + 1 + r[None, :], qa, mask=(offs_m < T)[:, None] & (r < R - 1)[None, :])
        tl.store(QA2 + qa_rows, left, mask=offs_m < T)
    else:
        w_mask = (r < R - 2)[None, :] & d_ok[:, None]
        w_in = tl.load(WK + (1 + r)[None, :] * D + offs_d[:, None], mask=w_mask, other=0.0)
        right = tl.sum(qf * tl.load(WK + (R - 1) * D + offs_d, mask=d_ok, other=0.0).to(ACC)[None, :], 1) * qk_scale
        if TABLE_TF32:
            qa = tl.dot(qf, w_in, out_dtype=ACC, input_precision="tf32")
        elif PRECISION == "tf32x3":  # q (fp16 / bf16) is exact in tf32: only the table is split
            w_hi, w_lo = _tf32_parts(w_in)
            qa = tl.dot(qf, w_hi, tl.dot(qf, w_lo, out_dtype=ACC, input_precision="tf32"), input_precision="tf32")
        else:
            qa = tl.dot(qf, w_in.to(ACC), out_dtype=ACC, input_precision=PRECISION)
        _store_bins(QA2, qa_rows, qa * qk_scale, left, right, R, T, offs_m, RI)
    tl.debug_barrier()  # the band tiles and the far tiles' row terms read other threads' QA


@triton.jit
def _dot_table(a, table, acc, like, ACC: tl.constexpr, PRECISION: tl.constexpr, TABLE_TF32: tl.constexpr,
               HALF_BINS: tl.constexpr):
    """``acc + a table`` for float32 ``a`` (PB, dQA) and one of Shaw's tables: with ``HALF_BINS`` (the
    table in the inputs' fp16 / bf16, ``like``'s) one dot of ``a`` rounded to that dtype, as FA2 rounds
    P and dS before their dots; with ``TABLE_TF32`` (the table exact in tf32) ``a`` alone is split, two
    tf32 dots; else at ``PRECISION`` (tf32x3: three)."""
    if HALF_BINS:
        out = tl.dot(a.to(like.dtype), table.to(like.dtype), acc, out_dtype=ACC)
    elif TABLE_TF32:
        a_hi, a_lo = _tf32_parts(a)
        out = tl.dot(a_hi, table, tl.dot(a_lo, table, acc, out_dtype=ACC, input_precision="tf32"),
                     out_dtype=ACC, input_precision="tf32")
    else:
        out = tl.dot(a, table, acc, out_dtype=ACC, input_precision=PRECISION)
    return out


@triton.jit
def _fwd_tile(acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, n0, offs_m, pos_i, i0, b, h, T, S, first0, sk, sv, qk_scale,
              slope2, KB, BIAS2, QA2, qa_rows, row, clip,
              KIND: tl.constexpr, BIAS: tl.constexpr, KEYS: tl.constexpr, VALUES: tl.constexpr,
              CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr, RI: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, D, ACC: tl.constexpr, PRECISION: tl.constexpr,
              EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr, keep_lo=0, keep_hi=0,
              KEEP: tl.constexpr = False, PB_LIVE: tl.constexpr = True, SHIFT: tl.constexpr = False):
    """One key tile of a query tile (``KEEP``: only keys in ``[keep_lo, keep_hi)``; ``PB_LIVE`` False: PB's
    interior bins are not carried, the band comes later; ``SHIFT``: :func:`_shift`)."""
    if SHIFT:
        n0, keep_lo, keep_hi = _shift(n0, S, keep_lo, keep_hi, KEEP, BLOCK_N)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    # the tiles' scalar bases: whole key tiles, no causal mask, not relpos k (there it spilled)
    k = _tile_rows(K, koff, n0, sk, offs_n, S, offs_d, D, EVEN_N or SHIFT, EVEN_D, BLOCK_N,
                   (EVEN_N or SHIFT) and not CAUSAL and (VALUES or not KEYS))
    x, dist, inside = _scores(q, k, offs_m, n0, offs_n, pos_i, i0, b, h, T, S, first0, qk_scale, slope2, KB, BIAS2,
                              QA2, qa_rows, clip, KIND, BIAS, KEYS, CAUSAL, HAS_PAD, ACC, PRECISION, EVEN_N or SHIFT,
                              BLOCK_M, BLOCK_N, (EVEN_N or SHIFT) and not CAUSAL and (VALUES or not KEYS), keep_lo,
                              keep_hi, KEEP or SHIFT)
    m_new = tl.maximum(m_i, tl.max(x, 1) + row)
    p = tl.exp2(x - (m_new - row)[:, None])  # no key yet: m stays -1e30, exp2(-inf + 1e30) = 0
    alpha = tl.exp2(m_i - m_new)
    rs = tl.sum(p, 1)
    l_i = l_i * alpha + rs
    v = _tile_rows(V, koff, n0, sv, offs_n, S, offs_d, D, EVEN_N or SHIFT, EVEN_D, BLOCK_N,
                   (EVEN_N or SHIFT) and not CAUSAL and (VALUES or not KEYS))
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, out_dtype=ACC, input_precision=PRECISION)
    if VALUES:
        pbl = pbl * alpha
        pbr = pbr * alpha
        if PB_LIVE:
            pb = pb * alpha[:, None]
        if KIND == 0:
            pbl += rs
        if KIND == 2:
            pbr += rs
        if KIND == 1:
            pbl += tl.sum(tl.where(dist <= -clip, p, 0.0), 1)
            pbr += tl.sum(tl.where(dist >= clip, p, 0.0), 1)
            pb += _bins(p, pos_i, n0, clip, RI, BLOCK_N)
    return acc, m_new, l_i, pb, pbl, pbr


@triton.jit
def forward(Q, K, V, O, LSE, PB, KB, BIAS2, SLOPES2, QA2, WK, AV, sqb, sqh, sqt, skb, skh, skt, svb, svh, svt,
            qk_scale, T, S, H, D, start, R, clip, WL, WR, NDIST, B0, BROW,
            BIAS: tl.constexpr, KEYS: tl.constexpr, VALUES: tl.constexpr, CAUSAL: tl.constexpr,
            HAS_PAD: tl.constexpr, SPLIT: tl.constexpr, RI: tl.constexpr, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
              EVEN_D: tl.constexpr, KEYS_PRECISION: tl.constexpr = "ieee", TABLE_TF32: tl.constexpr = False,
            TABLE_NATIVE: tl.constexpr = False, MERGE_FAR: tl.constexpr = False, BLOCK_NF: tl.constexpr = 0,
            SHIFT: tl.constexpr = False, HALF_BINS: tl.constexpr = False, PEEL: tl.constexpr = False,
            SHIFT_BAND: tl.constexpr = True):
    """One query tile: the output, the base-2 log-sum-exp and (``VALUES``) PB (B H, T, R),
    each row's probability mass per clipped distance, accumulated beside the output and
    rescaled with it, stored and added to the output as ``PB a_V`` (AV: Shaw's value table,
    (R, D) contiguous, in the accumulator's dtype; one dot at ``KEYS_PRECISION``, or with ``HALF_BINS``
    of PB rounded to the inputs' dtype (:func:`_dot_table`), the edge rows as products: the output is
    rounded once); (``KEYS``) the rows'
    QA, computed first (:func:`_key_products`; WK: Shaw's key table in q's dtype with
    ``TABLE_NATIVE``, else in the accumulator's, (2k + 1, D) contiguous) and written to QA2
    (B H, T, R), which the band tiles, the far tiles' row terms and the backward kernels read.
    ``MERGE_FAR`` (a bias by bucket alone, non-causal): the far tiles of both sides in one loop
    before the band, one pipeline prologue less. ``PEEL`` (with ``SHIFT``): the far loop that ends at the length runs
    whole tiles, its moved-back tile after it (else every tile of the far loops takes the shift). ``SHIFT_BAND``
    False (a bias by bucket: its band reads aligned copies from each tile's first key): the band's tiles stay in place,
    a partial one masked."""
    bh = tl.program_id(0)
    pid_m = tl.program_id(1)
    b = bh // H
    h = bh % H
    if BIAS == 1:  # distance 0 in the head's first copy (8 copies of BROW a head, see _band)
        BIAS2 += h * 8 * BROW + B0
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    pos_i = start + offs_m
    i0 = start + pid_m * BLOCK_M
    q_mask = (offs_m < T)[:, None] & (offs_d < D)[None, :]
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqt + offs_d[None, :], mask=q_mask, other=0.0)
    koff = b * skb + h * skh
    slope2 = 0.0
    if BIAS == 2:
        slope2 = tl.load(SLOPES2 + h).to(ACC)
    qa_rows = (bh * T + offs_m) * R
    qa_right = tl.zeros((BLOCK_M,), ACC)
    if KEYS:
        _key_products(q, WK, QA2, qa_rows, offs_m, offs_d, T, D, R, qk_scale, RI, ACC, KEYS_PRECISION, TABLE_TF32,
                      TABLE_NATIVE)
        qa_right = tl.load(QA2 + qa_rows + R - 1, mask=offs_m < T, other=0.0)
    first0 = _bias_first(-i0, BROW, BLOCK_M)
    m_i = tl.full((BLOCK_M,), -1.0e30, ACC)  # finite: a row without keys so far keeps alpha = 1, p = 0
    l_i = tl.zeros((BLOCK_M,), ACC)
    acc = tl.zeros((BLOCK_M, BLOCK_D), ACC)
    pb = tl.zeros((BLOCK_M, RI), ACC)
    pbl = tl.zeros((BLOCK_M,), ACC)
    pbr = tl.zeros((BLOCK_M,), ACC)
    hi = S
    if CAUSAL:
        hi = tl.minimum(S, i0 + BLOCK_M)
    if BLOCK_NF == 0:
        fl, fr = _stages(i0, 0, hi, WL, WR, BLOCK_M, BLOCK_N, SPLIT, CAUSAL)
        row = _rows_term(offs_m, i0, h, T, S, WL, WR, slope2, BIAS2, QA2, qa_rows, R, 0, BIAS, KEYS, ACC)
        if MERGE_FAR:  # far-left and far-right tiles in one loop (one pipeline prologue), the side's row term
            # chosen per tile (a bias by bucket alone, non-causal: one value a side)
            row_r = _rows_term(offs_m, i0, h, T, S, WL, WR, slope2, BIAS2, QA2, qa_rows, R, 2, BIAS, False, ACC)
            n_left = (fl + BLOCK_N - 1) // BLOCK_N
            rw = _whole(fr, hi, PEEL, BLOCK_N)  # PEEL: whole tiles in the loop, the partial one after it
            for t in range(0, n_left + (rw - fr + BLOCK_N - 1) // BLOCK_N):
                right = t >= n_left
                n0 = tl.where(right, fr + (t - n_left) * BLOCK_N, t * BLOCK_N)
                acc, m_i, l_i, pb, pbl, pbr = _fwd_tile(
                    acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, n0, offs_m, pos_i, i0, b, h, T, S, first0, skt, svt,
                    qk_scale, slope2, KB, BIAS2, QA2, qa_rows, tl.where(right, row_r, row), clip, 0, BIAS, KEYS, VALUES,
                    CAUSAL, HAS_PAD, RI, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N or PEEL, EVEN_D,
                    SHIFT=SHIFT and not PEEL)
            if PEEL:
                if rw < hi:
                    acc, m_i, l_i, pb, pbl, pbr = _fwd_tile(
                        acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, rw, offs_m, pos_i, i0, b, h, T, S, first0, skt,
                        svt, qk_scale, slope2, KB, BIAS2, QA2, qa_rows, row_r, clip, 0, BIAS, KEYS, VALUES, CAUSAL,
                        HAS_PAD, RI, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N, EVEN_D, SHIFT=True)
        # far-left (every tile when no term splits; split, it ends at a whole tile): whole tiles, then the last one
        # moved back where the lengths leave it partial (PEEL; only without a split). Without PEEL (alibi) every
        # tile takes the shift, though a split's are whole: told so, alibi's 128 x 64 blocks spill 4 B (modelled)
        fend = fl if not MERGE_FAR else 0
        fw = _whole(0, fend, PEEL and not SPLIT, BLOCK_N)
        for n0 in range(0, fw, BLOCK_N):
            acc, m_i, l_i, pb, pbl, pbr = _fwd_tile(
                acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, n0, offs_m, pos_i, i0, b, h, T, S, first0, skt, svt,
                qk_scale, slope2, KB, BIAS2, QA2, qa_rows, row, clip, 0, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, RI,
                BLOCK_M, BLOCK_N, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N or PEEL, EVEN_D, SHIFT=SHIFT and not PEEL)
        if PEEL and not SPLIT:
            if fw < fend:
                acc, m_i, l_i, pb, pbl, pbr = _fwd_tile(
                    acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, fw, offs_m, pos_i, i0, b, h, T, S, first0, skt, svt,
                    qk_scale, slope2, KB, BIAS2, QA2, qa_rows, row, clip, 0, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, RI,
                    BLOCK_M, BLOCK_N, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N, EVEN_D, SHIFT=True)
        if SPLIT:
            zero = tl.zeros((BLOCK_M,), ACC)
            for n0 in range(fl, fr, BLOCK_N):  # band
                acc, m_i, l_i, pb, pbl, pbr = _fwd_tile(
                    acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, n0, offs_m, pos_i, i0, b, h, T, S, first0, skt, svt,
                    qk_scale, slope2, KB, BIAS2, QA2, qa_rows, zero, clip, 1, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD,
                    RI, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N, EVEN_D, SHIFT=SHIFT and SHIFT_BAND)
            row = _rows_term(offs_m, i0, h, T, S, WL, WR, slope2, BIAS2, QA2, qa_rows, R, 2, BIAS, False, ACC) + qa_right
            rend = hi if not MERGE_FAR else fr
            rw = _whole(fr, rend, PEEL and not CAUSAL, BLOCK_N)
            for n0 in range(fr, rw, BLOCK_N):  # far-right: whole tiles, then the partial one moved back (PEEL)
                acc, m_i, l_i, pb, pbl, pbr = _fwd_tile(
                    acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, n0, offs_m, pos_i, i0, b, h, T, S, first0, skt, svt,
                    qk_scale, slope2, KB, BIAS2, QA2, qa_rows, row, clip, 2, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD,
                    RI, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N or (PEEL and not CAUSAL), EVEN_D,
                    SHIFT=SHIFT and not (PEEL and not CAUSAL))
            if PEEL and not CAUSAL and not MERGE_FAR:
                if rw < rend:
                    acc, m_i, l_i, pb, pbl, pbr = _fwd_tile(
                        acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, rw, offs_m, pos_i, i0, b, h, T, S, first0, skt,
                        svt, qk_scale, slope2, KB, BIAS2, QA2, qa_rows, row, clip, 2, BIAS, KEYS, VALUES, CAUSAL,
                        HAS_PAD, RI, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N, EVEN_D, SHIFT=True)
    else:  # far tiles BLOCK_NF keys wide, then the band's BLOCK_N tiles (as backward_q's, :func:`_q_band`): PB's
        # interior bins start at the band, so the far tiles carry none
        fl, fr = _q_band(i0, hi, WL, WR, BLOCK_M, BLOCK_N)
        row = _rows_term(offs_m, i0, h, T, S, WL, WR, slope2, BIAS2, QA2, qa_rows, R, 0, BIAS, KEYS, ACC)
        flw = (fl // BLOCK_NF) * BLOCK_NF
        for n0 in range(0, flw, BLOCK_NF):  # far-left (whole tiles)
            acc, m_i, l_i, pb, pbl, pbr = _fwd_tile(
                acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, n0, offs_m, pos_i, i0, b, h, T, S, first0, skt, svt,
                qk_scale, slope2, KB, BIAS2, QA2, qa_rows, row, clip, 0, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, RI,
                BLOCK_M, BLOCK_NF, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N or PEEL, EVEN_D, PB_LIVE=False,
                SHIFT=SHIFT and not PEEL)
        if flw < fl:  # its tile that reaches into the band
            acc, m_i, l_i, pb, pbl, pbr = _fwd_tile(
                acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, flw, offs_m, pos_i, i0, b, h, T, S, first0, skt, svt,
                qk_scale, slope2, KB, BIAS2, QA2, qa_rows, row, clip, 0, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, RI,
                BLOCK_M, BLOCK_NF, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N, EVEN_D, 0, fl, True, False, SHIFT=SHIFT)
        if not CAUSAL:  # far-right
            row = _rows_term(offs_m, i0, h, T, S, WL, WR, slope2, BIAS2, QA2, qa_rows, R, 2, BIAS, False, ACC) + qa_right
            frw = ((fr + BLOCK_NF - 1) // BLOCK_NF) * BLOCK_NF
            if fr < frw:  # its tile that reaches into the band
                acc, m_i, l_i, pb, pbl, pbr = _fwd_tile(
                    acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, frw - BLOCK_NF, offs_m, pos_i, i0, b, h, T, S, first0,
                    skt, svt, qk_scale, slope2, KB, BIAS2, QA2, qa_rows, row, clip, 2, BIAS, KEYS, VALUES, CAUSAL,
                    HAS_PAD, RI, BLOCK_M, BLOCK_NF, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N, EVEN_D, fr, hi, True,
                    False, SHIFT=SHIFT)
            rw = _whole(frw, hi, PEEL, BLOCK_NF)
            for n0 in range(frw, rw, BLOCK_NF):  # whole tiles, then the partial one moved back (PEEL)
                acc, m_i, l_i, pb, pbl, pbr = _fwd_tile(
                    acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, n0, offs_m, pos_i, i0, b, h, T, S, first0, skt, svt,
                    qk_scale, slope2, KB, BIAS2, QA2, qa_rows, row, clip, 2, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, RI,
                    BLOCK_M, BLOCK_NF, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N or PEEL, EVEN_D, PB_LIVE=False,
                    SHIFT=SHIFT and not PEEL)
            if PEEL:
                if rw < hi:
                    acc, m_i, l_i, pb, pbl, pbr = _fwd_tile(
                        acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, rw, offs_m, pos_i, i0, b, h, T, S, first0, skt,
                        svt, qk_scale, slope2, KB, BIAS2, QA2, qa_rows, row, clip, 2, BIAS, KEYS, VALUES, CAUSAL,
                        HAS_PAD, RI, BLOCK_M, BLOCK_NF, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N, EVEN_D,
                        PB_LIVE=False, SHIFT=True)
        pb = tl.zeros((BLOCK_M, RI), ACC)
        zero = tl.zeros((BLOCK_M,), ACC)
        for n0 in range(fl, fr, BLOCK_N):  # band
            acc, m_i, l_i, pb, pbl, pbr = _fwd_tile(
                acc, m_i, l_i, pb, pbl, pbr, q, K, V, koff, n0, offs_m, pos_i, i0, b, h, T, S, first0, skt, svt,
                qk_scale, slope2, KB, BIAS2, QA2, qa_rows, zero, clip, 1, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD,
                RI, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N, EVEN_D, SHIFT=SHIFT and SHIFT_BAND)
    has = l_i > 0
    l_safe = tl.where(has, l_i, 1.0)
    out = acc / l_safe[:, None]  # 0 for a row without keys (acc stayed 0)
    lse = tl.where(has, m_i + tl.log2(l_safe), float("inf"))
    if VALUES:
        pb = pb / l_safe[:, None]
        pbl = pbl / l_safe
        pbr = pbr / l_safe
        _store_bins(PB, qa_rows, pb, pbl, pbr, R, T, offs_m, RI)
        r = tl.arange(0, RI)
        d_ok = offs_d < D
        av = tl.load(AV + (1 + r)[:, None] * D + offs_d[None, :], mask=(r < R - 2)[:, None] & d_ok[None, :], other=0.0)
        out = _dot_table(pb, av, out, q, ACC, KEYS_PRECISION, TABLE_TF32, HALF_BINS)
        out += pbl[:, None] * tl.load(AV + offs_d, mask=d_ok, other=0.0)[None, :]
        out += pbr[:, None] * tl.load(AV + (R - 1) * D + offs_d, mask=d_ok, other=0.0)[None, :]
    o_off = bh * T * D + offs_m[:, None] * D + offs_d[None, :]
    tl.store(O + o_off, out.to(O.dtype.element_ty), mask=q_mask)
    tl.store(LSE + bh * T + offs_m, lse, mask=offs_m < T)


@triton.jit
def backward_delta(O, DO, PB, DPB, DELTA, LSE, QA2, LSEF, DELTAF, AV, DAV, sdb, sdh, sdt, T, H, D, R,
                   KEYS: tl.constexpr, VALUES: tl.constexpr, RI: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_D: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr = "ieee",
                   TABLE_TF32: tl.constexpr = False, HALF_BINS: tl.constexpr = False, WGMMA: tl.constexpr = False):
    """Each row's delta ``rowsum(dO O)`` from the output as stored (rounded), as FA2 makes it: with ``VALUES`` too,
    since dP_ij = dO_i . v_j + dPB[i, clip(j - i) + k] gives sum_j P_ij dP_ij = dO_i . O_i, the value term in O.
    The backward's first kernel (the tutorial's ``_attn_bwd_preprocess``): read by both backward kernels.
    With Shaw's terms, also what :func:`backward_kv`'s far tiles read per row, (B H, 2, T)
    (far-left, far-right): ``LSEF``, the log-sum-exp less the row's edge QA (``KEYS``), and
    ``DELTAF``, delta less its edge dPB (``VALUES``). With ``VALUES`` it makes the value
    term's products from the dO tile it holds (AV: Shaw's value table, (R, D) contiguous, in
    the accumulator's dtype): ``dPB = dO a_V^T`` into DPB (B H, T, R), and the program's share
    of the table's gradient, ``PB^T dO``, into DAV (programs, R, D; the caller sums it over
    the programs): float32 operands at ``PRECISION`` (tf32x3: dO in fp16 / bf16 is exact in
    tf32, so the other operand alone is split, :func:`_tf32_parts`; ``TABLE_TF32``: the table in
    fp16 / bf16, exact in tf32, dPB in one tf32 dot; ``HALF_BINS``: the table in dO's dtype, both dots
    in it, PB rounded to it as FA2 rounds P for dV), columns 1 .. R - 1 by the dots (the right
    edge as the interior tile's spare column: RI >= 2k), column 0 as sums; ``WGMMA`` (Hopper's configs) d a_V's
    share made as its transpose ``dO^T PB`` (head-size rows, the warp group's 64-row dot), and with ``HALF_BINS``
    its row 0 as a dot too (dO^T times PB's left edge), not a sum across rows."""
    bh = tl.program_id(0)
    pid_m = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q_mask = (offs_m < T)[:, None] & (offs_d < D)[None, :]
    do = tl.load(DO + b * sdb + h * sdh + offs_m[:, None] * sdt + offs_d[None, :], mask=q_mask, other=0.0)
    o = tl.load(O + bh * T * D + offs_m[:, None] * D + offs_d[None, :], mask=q_mask, other=0.0)
    dof = do.to(ACC)
    delta = tl.sum(dof * o.to(ACC), 1)
    rows = (bh * T + offs_m) * R
    if VALUES:  # columns 1 .. R - 1 by dots (the interior and the right edge: RI >= 2k = R - 1), column 0 as sums
        r = tl.arange(0, RI)
        in_ok = r < R - 1
        d_ok = offs_d < D
        m_ok = offs_m < T
        av = tl.load(AV + (1 + r)[None, :] * D + offs_d[:, None], mask=in_ok[None, :] & d_ok[:, None], other=0.0)
        if HALF_BINS:  # dO and the table as they are: exact products, float32 sums
            dpb = tl.dot(do, av.to(do.dtype), out_dtype=ACC)
        elif TABLE_TF32:  # dO and the table exact in tf32: one dot is exact
            dpb = tl.dot(dof, av, out_dtype=ACC, input_precision="tf32")
        elif PRECISION == "tf32x3":
            a_hi, a_lo = _tf32_parts(av)
            dpb = tl.dot(dof, a_hi, tl.dot(dof, a_lo, out_dtype=ACC, input_precision="tf32"), input_precision="tf32")
        else:
            dpb = tl.dot(dof, av, out_dtype=ACC, input_precision=PRECISION)
        dpb_l = tl.sum(dof * tl.load(AV + offs_d, mask=d_ok, other=0.0)[None, :], 1)
        dpb_r = tl.sum(tl.where((r == R - 2)[None, :], dpb, 0.0), 1)
        tl.store(DPB + rows[:, None] + 1 + r[None, :], dpb, mask=m_ok[:, None] & in_ok[None, :])
        tl.store(DPB + rows, dpb_l, mask=m_ok)
        pb = tl.load(PB + rows[:, None] + 1 + r[None, :], mask=m_ok[:, None] & in_ok[None, :], other=0.0)
        pb_l = tl.load(PB + rows, mask=m_ok, other=0.0)
        tl.store(DELTAF + 2 * bh * T + offs_m, delta - dpb_l, mask=m_ok)
        tl.store(DELTAF + (2 * bh + 1) * T + offs_m, delta - dpb_r, mask=m_ok)
        part = DAV + (bh * tl.num_programs(1) + pid_m) * R * D
        if WGMMA and HALF_BINS:  # row 0 as a dot: dO^T times PB's left edge
            e0 = tl.where((tl.arange(0, 16) == 0)[None, :], pb_l[:, None], 0.0).to(do.dtype)
            left = tl.sum(tl.dot(tl.trans(do), e0, out_dtype=ACC), 1)
        else:
            left = tl.sum(pb_l[:, None] * dof, 0)
        if WGMMA:  # Hopper: d a_V's share as dO^T PB (head-size rows, the warp group's 64-row dot), stored transposed
            if HALF_BINS:
                dav = tl.dot(tl.trans(do), pb.to(do.dtype), out_dtype=ACC)
            elif PRECISION == "tf32x3":
                p_hi, p_lo = _tf32_parts(pb)
                dav = tl.dot(tl.trans(dof), p_hi, tl.dot(tl.trans(dof), p_lo, out_dtype=ACC, input_precision="tf32"),
                             input_precision="tf32")
            else:
                dav = tl.dot(tl.trans(dof), pb, out_dtype=ACC, input_precision=PRECISION)
            tl.store(part + (1 + r)[None, :] * D + offs_d[:, None], dav, mask=in_ok[None, :] & d_ok[:, None])
        else:
            if HALF_BINS:
                dav = tl.dot(tl.trans(pb.to(do.dtype)), do, out_dtype=ACC)
            elif PRECISION == "tf32x3":
                p_hi, p_lo = _tf32_parts(tl.trans(pb))
                dav = tl.dot(p_hi, dof, tl.dot(p_lo, dof, out_dtype=ACC, input_precision="tf32"), input_precision="tf32")
            else:
                dav = tl.dot(tl.trans(pb), dof, out_dtype=ACC, input_precision=PRECISION)
            tl.store(part + (1 + r)[:, None] * D + offs_d[None, :], dav, mask=in_ok[:, None] & d_ok[None, :])
        tl.store(part + offs_d, left, mask=d_ok)
    tl.store(DELTA + bh * T + offs_m, delta, mask=offs_m < T)
    if KEYS:
        lse = tl.load(LSE + bh * T + offs_m, mask=offs_m < T, other=float("inf"))
        tl.store(LSEF + 2 * bh * T + offs_m, lse - tl.load(QA2 + rows, mask=offs_m < T, other=0.0), mask=offs_m < T)
        tl.store(LSEF + (2 * bh + 1) * T + offs_m, lse - tl.load(QA2 + rows + R - 1, mask=offs_m < T, other=0.0),
                 mask=offs_m < T)


@triton.jit
def _scores(q, k, offs_m, n0, offs_n, pos_i, i0, b, h, T, S, first0, qk_scale, slope2, KB, BIAS2, QA2, qa_rows, clip,
            KIND: tl.constexpr, BIAS: tl.constexpr, KEYS: tl.constexpr, CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr,
            ACC: tl.constexpr, PRECISION: tl.constexpr, EVEN_N: tl.constexpr, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr, TILE_BASE: tl.constexpr = False, keep_lo=0, keep_hi=0,
            KEEP: tl.constexpr = False):
    """One tile's base-2 scores with every term (the forward's and the backward's one rule):
    QK^T scaled, the per-column terms, and in band tiles (``KIND`` 1) the per-distance ones; with
    the pairs' distances and which are inside (T, S). ``KEEP``: the keys outside ``[keep_lo,
    keep_hi)`` masked (-inf in the column vector: a far tile that reaches into the band)."""
    s = tl.dot(q, tl.trans(k), out_dtype=ACC, input_precision=PRECISION)
    if HAS_PAD or (not EVEN_N) or (BIAS == 2 and KIND != 1) or KEEP:
        col = _columns(offs_n, n0, b, S, i0, slope2, KB, HAS_PAD, BIAS, KIND, ACC, EVEN_N, BLOCK_N, TILE_BASE)
        if KEEP:
            col = tl.where((offs_n >= keep_lo) & (offs_n < keep_hi), col, float("-inf"))
        x = s * qk_scale + col[None, :]
    else:
        x = s * qk_scale
    dist = offs_n[None, :] - pos_i[:, None]
    inside = (offs_m < T)[:, None] & (offs_n < S)[None, :]
    if KIND == 1:
        x = _band(x, dist, inside, n0, i0, h, S, first0, slope2, BIAS2, QA2, qa_rows, clip, BIAS, KEYS, CAUSAL,
                  BLOCK_M, BLOCK_N)
    return x, dist, inside


@triton.jit
def _bwd_scores(q, k, offs_m, n0, offs_n, pos_i, i0, b, h, T, S, first0, qk_scale, slope2, KB, BIAS2, QA2, qa_rows,
                row, lse, clip, KIND: tl.constexpr, BIAS: tl.constexpr, KEYS: tl.constexpr, CAUSAL: tl.constexpr,
                HAS_PAD: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, EVEN_M: tl.constexpr,
                EVEN_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, keep_lo=0, keep_hi=0,
                KEEP: tl.constexpr = False):
    """P of one tile, recomputed from the base-2 log-sum-exp (0 where masked or the row has
    no key); with the pairs' distances and which are inside (T, S)."""
    x, dist, inside = _scores(q, k, offs_m, n0, offs_n, pos_i, i0, b, h, T, S, first0, qk_scale, slope2, KB, BIAS2,
                              QA2, qa_rows, clip, KIND, BIAS, KEYS, CAUSAL, HAS_PAD, ACC, PRECISION, EVEN_N,
                              BLOCK_M, BLOCK_N, KIND != 1, keep_lo, keep_hi, KEEP)
    return tl.exp2(x - (lse - row)[:, None]), dist, inside


@triton.jit
def _dq_tile(dq, dqa, dql, dqr, carry, far, q, do, K, V, koff, n0, WOFF, offs_m, pos_i, i0, b, h, bh, pid_m, T, S,
             NDIST, first0, sk, sv, qk_scale, slope2, KB, BIAS2, QA2, DPB, qa_rows, row, lse, delta, DTABLE, clip,
             KIND: tl.constexpr, BIAS: tl.constexpr, KEYS: tl.constexpr, VALUES: tl.constexpr,
             CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr, TABLE_GRAD: tl.constexpr, RI: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, D,
             ACC: tl.constexpr, PRECISION: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
              EVEN_D: tl.constexpr, keep_lo=0, keep_hi=0, KEEP: tl.constexpr = False, SHIFT: tl.constexpr = False):
    if SHIFT:
        n0, keep_lo, keep_hi = _shift(n0, S, keep_lo, keep_hi, KEEP, BLOCK_N)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    k = _tile_rows(K, koff, n0, sk, offs_n, S, offs_d, D, EVEN_N or SHIFT, EVEN_D, BLOCK_N,
                   (EVEN_N or SHIFT) and not CAUSAL)
    v = _tile_rows(V, koff, n0, sv, offs_n, S, offs_d, D, EVEN_N or SHIFT, EVEN_D, BLOCK_N,
                   (EVEN_N or SHIFT) and not CAUSAL)
    p, dist, inside = _bwd_scores(q, k, offs_m, n0, offs_n, pos_i, i0, b, h, T, S, first0, qk_scale, slope2, KB,
                                  BIAS2, QA2, qa_rows, row, lse, clip, KIND, BIAS, KEYS, CAUSAL, HAS_PAD, ACC,
                                  PRECISION, EVEN_M, EVEN_N or SHIFT, BLOCK_M, BLOCK_N, keep_lo, keep_hi,
                                  KEEP or SHIFT)
    dp = tl.dot(do, tl.trans(v), out_dtype=ACC, input_precision=PRECISION)
    if VALUES and KIND == 1:
        r = tl.minimum(tl.maximum(dist, -clip), clip) + clip
        dp += tl.load(DPB + qa_rows[:, None] + r, mask=inside, other=0.0)
    ds = p * (dp - delta[:, None])
    dq += tl.dot(ds.to(k.dtype), k, out_dtype=ACC, input_precision=PRECISION)
    if KEYS:
        if KIND == 0:
            dql += tl.sum(ds, 1)
        if KIND == 2:
            dqr += tl.sum(ds, 1)
        if KIND == 1:
            dql += tl.sum(tl.where(dist <= -clip, ds, 0.0), 1)
            dqr += tl.sum(tl.where(dist >= clip, ds, 0.0), 1)
            dqa += _bins(ds, pos_i, n0, clip, RI, BLOCK_N)
    if TABLE_GRAD:
        if KIND != 1:  # a far stage's one bucket: dS added up per pair, summed once after the stage's loop
            far += ds
        if KIND == 1:  # the tile's diagonals, from g[i, c] = ds[i, (c + i) mod BLOCK_N] (BLOCK_M <= BLOCK_N)
            c = tl.arange(0, BLOCK_N)[None, :]
            jw = c + tl.arange(0, BLOCK_M)[:, None]
            g = tl.gather(ds, jw % BLOCK_N, 1)
            wr = tl.sum(tl.where(jw >= BLOCK_N, g, 0.0), 0)
            # the wrapped sums are the previous tile's unwrapped distances (j - i = n0 - i0 - BLOCK_N + c):
            # stored with them (carried), each cell once
            tl.store(DTABLE + (bh * tl.num_programs(1) + pid_m) * NDIST + n0 - i0 - BLOCK_N + WOFF
                     + tl.arange(0, BLOCK_N), carry + wr)
            carry = tl.sum(g, 0) - wr
    return dq, dqa, dql, dqr, carry, far


@triton.jit
def backward_q(Q, K, V, DO, LSE, DELTA, DQ, DWK, DPB, DTABLE, DFAR, KB, BIAS2, SLOPES2, QA2, WK,
               sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sdb, sdh, sdt,
               qk_scale, T, S, H, D, start, R, clip, WL, WR, NDIST, B0, BROW, WOFF,
               BIAS: tl.constexpr, KEYS: tl.constexpr, VALUES: tl.constexpr, CAUSAL: tl.constexpr,
               HAS_PAD: tl.constexpr, SPLIT: tl.constexpr, TABLE_GRAD: tl.constexpr,
               RI: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
               ACC: tl.constexpr, PRECISION: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
              EVEN_D: tl.constexpr, KEYS_PRECISION: tl.constexpr = "ieee", TABLE_TF32: tl.constexpr = False,
               NWIN: tl.constexpr = 16, WGMMA: tl.constexpr = False, BLOCK_NF: tl.constexpr = 0,
               SHIFT: tl.constexpr = False, HALF_BINS: tl.constexpr = False, SHIFT_BAND: tl.constexpr = True,
               PEEL: tl.constexpr = False):
    """One query tile (the rows' delta from :func:`backward_delta`): dq over every key tile
    it sees; (``KEYS``) dQA, its dS summed per table row, and after the loops its share of
    dq, ``dQA w_K`` (WK: Shaw's key table (2k + 1, D), contiguous), and the program's share
    of the table's gradient, ``scale dQA^T q``, into DWK (programs, R, D; the caller sums it
    over the programs), with ``WGMMA`` (Hopper's configs) made as its transpose ``q^T dQA``, a dot
    of BLOCK_D rows as Hopper's warp-group instructions take it: one dot each, float32 operands at ``KEYS_PRECISION``
    (tf32x3 keeps them at float32's precision on tensor cores; q is exact in tf32, so dQA alone is
    split, once for both: two dots; ``TABLE_TF32``, a table in fp16 / bf16, the same for dQA w_K; ``HALF_BINS``,
    the table in q's dtype: dQA rounded to it, as FA2 rounds dS for dq and dk, one dot each), table rows 1 .. R - 1 by the dots (the right edge's dQA in
    the tile's spare column R - 2: RI >= 2k), row 0 as sums; (``TABLE_GRAD``) dS summed per
    distance (band tiles, into DTABLE; the cells of the program's rows that no band tile wrote
    are zeroed after the loops, ``NWIN``: a power of two >= NDIST) and over the far tiles (two
    cells of DFAR). ``BLOCK_NF`` (Shaw's terms, no table gradient; 0: off; ``EVEN_N`` holds for both widths): the far
    tiles that many keys wide, the band's tiles BLOCK_N (:func:`_q_band`): a far tile only sums rows, a
    band tile bins dQA, which holds the registers that keep it narrow. ``PEEL``, ``SHIFT_BAND``: as the forward's."""
    bh = tl.program_id(0)
    pid_m = tl.program_id(1)
    b = bh // H
    h = bh % H
    if BIAS == 1:  # distance 0 in the head's first copy (8 copies of BROW a head, see _band)
        BIAS2 += h * 8 * BROW + B0
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    pos_i = start + offs_m
    i0 = start + pid_m * BLOCK_M
    q_mask = (offs_m < T)[:, None] & (offs_d < D)[None, :]
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqt + offs_d[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO + b * sdb + h * sdh + offs_m[:, None] * sdt + offs_d[None, :], mask=q_mask, other=0.0)
    qa_rows = (bh * T + offs_m) * R
    delta = tl.load(DELTA + bh * T + offs_m, mask=offs_m < T, other=0.0)
    lse = tl.load(LSE + bh * T + offs_m, mask=offs_m < T, other=float("inf"))
    koff = b * skb + h * skh
    first0 = _bias_first(-i0, BROW, BLOCK_M)
    slope2 = 0.0
    if BIAS == 2:
        slope2 = tl.load(SLOPES2 + h).to(ACC)
    dq = tl.zeros((BLOCK_M, BLOCK_D), ACC)
    dqa = tl.zeros((BLOCK_M, RI), ACC)
    dql = tl.zeros((BLOCK_M,), ACC)
    dqr = tl.zeros((BLOCK_M,), ACC)
    carry = tl.zeros((BLOCK_N,), ACC)
    far = tl.zeros((BLOCK_M, BLOCK_N), ACC)  # TABLE_GRAD: a far stage's dS, per pair
    hi = S
    if CAUSAL:
        hi = tl.minimum(S, i0 + BLOCK_M)
    if BLOCK_NF == 0:
        fl, fr = _stages(i0, 0, hi, WL, WR, BLOCK_M, BLOCK_N, SPLIT, CAUSAL)
        woff = WOFF  # DTABLE: a program's band distances j - i at columns j - i + woff (0 .. NDIST - 1)
        row = _rows_term(offs_m, i0, h, T, S, WL, WR, slope2, BIAS2, QA2, qa_rows, R, 0, BIAS, KEYS, ACC)
        delta_far = delta
        if VALUES:
            delta_far = delta - tl.load(DPB + qa_rows, mask=offs_m < T, other=0.0)
        # far-left (every tile when no term splits; split, it ends at a whole tile): whole tiles, then the last one
        # moved back where the lengths leave it partial (PEEL; only without a split)
        fw = _whole(0, fl, PEEL and not SPLIT, BLOCK_N)
        for n0 in range(0, fw, BLOCK_N):
            dq, dqa, dql, dqr, carry, far = _dq_tile(
                dq, dqa, dql, dqr, carry, far, q, do, K, V, koff, n0, woff, offs_m, pos_i, i0, b, h, bh, pid_m, T, S, NDIST,
                first0, skt, svt, qk_scale, slope2, KB, BIAS2, QA2, DPB, qa_rows, row, lse, delta_far, DTABLE, clip,
                0, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, TABLE_GRAD, RI, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC,
                PRECISION, EVEN_M, EVEN_N or (SHIFT and (SPLIT or PEEL)), EVEN_D, SHIFT=SHIFT and not (SPLIT or PEEL))
        if PEEL and not SPLIT:
            if fw < fl:
                dq, dqa, dql, dqr, carry, far = _dq_tile(
                    dq, dqa, dql, dqr, carry, far, q, do, K, V, koff, fw, woff, offs_m, pos_i, i0, b, h, bh, pid_m, T, S,
                    NDIST, first0, skt, svt, qk_scale, slope2, KB, BIAS2, QA2, DPB, qa_rows, row, lse, delta_far, DTABLE,
                    clip, 0, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, TABLE_GRAD, RI, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC,
                    PRECISION, EVEN_M, EVEN_N, EVEN_D, SHIFT=True)
        if WGMMA and EVEN_N:  # Hopper's configs: the rows' sums, across rows after the loops with the far-right's (sm_80 lost)
            far_left = tl.sum(far, 1)
        else:
            far_left = tl.sum(tl.sum(far, 1), 0)
        far = tl.zeros((BLOCK_M, BLOCK_N), ACC)
        if SPLIT:
            zero = tl.zeros((BLOCK_M,), ACC)
            for n0 in range(fl, fr, BLOCK_N):  # band
                dq, dqa, dql, dqr, carry, far = _dq_tile(
                    dq, dqa, dql, dqr, carry, far, q, do, K, V, koff, n0, woff, offs_m, pos_i, i0, b, h, bh, pid_m, T, S,
                    NDIST, first0, skt, svt, qk_scale, slope2, KB, BIAS2, QA2, DPB, qa_rows, zero, lse, delta, DTABLE, clip,
                    1, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, TABLE_GRAD, RI, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC,
                    PRECISION, EVEN_M, EVEN_N, EVEN_D, SHIFT=SHIFT and SHIFT_BAND)
            row = _rows_term(offs_m, i0, h, T, S, WL, WR, slope2, BIAS2, QA2, qa_rows, R, 2, BIAS, KEYS, ACC)
            if VALUES:
                delta_far = delta - tl.load(DPB + qa_rows + R - 1, mask=offs_m < T, other=0.0)
            rw = _whole(fr, hi, PEEL and not CAUSAL, BLOCK_N)
            for n0 in range(fr, rw, BLOCK_N):  # far-right: whole tiles, then the partial one moved back (PEEL)
                dq, dqa, dql, dqr, carry, far = _dq_tile(
                    dq, dqa, dql, dqr, carry, far, q, do, K, V, koff, n0, woff, offs_m, pos_i, i0, b, h, bh, pid_m, T, S,
                    NDIST, first0, skt, svt, qk_scale, slope2, KB, BIAS2, QA2, DPB, qa_rows, row, lse, delta_far, DTABLE,
                    clip, 2, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, TABLE_GRAD, RI, BLOCK_M, BLOCK_N, BLOCK_D, D,
                    ACC, PRECISION, EVEN_M, EVEN_N or (PEEL and not CAUSAL), EVEN_D,
                    SHIFT=SHIFT and not (PEEL and not CAUSAL))
            if PEEL and not CAUSAL:
                if rw < hi:
                    dq, dqa, dql, dqr, carry, far = _dq_tile(
                        dq, dqa, dql, dqr, carry, far, q, do, K, V, koff, rw, woff, offs_m, pos_i, i0, b, h, bh, pid_m, T,
                        S, NDIST, first0, skt, svt, qk_scale, slope2, KB, BIAS2, QA2, DPB, qa_rows, row, lse, delta_far,
                        DTABLE, clip, 2, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, TABLE_GRAD, RI, BLOCK_M, BLOCK_N, BLOCK_D,
                        D, ACC, PRECISION, EVEN_M, EVEN_N, EVEN_D, SHIFT=True)
    else:  # far tiles BLOCK_NF keys wide (aligned: the one that reaches into the band, its keys masked, outside
        # the loops), then the band's BLOCK_N tiles from the multiple of 16 at or left of its first key. (The band
        # loop is written twice: the form above keeps it between the far stages, which costs t5bias and alibi less,
        # modelled; this one needs it last.)
        fl, fr = _q_band(i0, hi, WL, WR, BLOCK_M, BLOCK_N)
        row = _rows_term(offs_m, i0, h, T, S, WL, WR, slope2, BIAS2, QA2, qa_rows, R, 0, BIAS, KEYS, ACC)
        delta_far = delta
        if VALUES:
            delta_far = delta - tl.load(DPB + qa_rows, mask=offs_m < T, other=0.0)
        flw = (fl // BLOCK_NF) * BLOCK_NF
        for n0 in range(0, flw, BLOCK_NF):  # far-left (whole tiles)
            dq, dqa, dql, dqr, carry, far = _dq_tile(
                dq, dqa, dql, dqr, carry, far, q, do, K, V, koff, n0, WOFF, offs_m, pos_i, i0, b, h, bh, pid_m, T, S,
                NDIST, first0, skt, svt, qk_scale, slope2, KB, BIAS2, QA2, DPB, qa_rows, row, lse, delta_far, DTABLE,
                clip, 0, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, TABLE_GRAD, RI, BLOCK_M, BLOCK_NF, BLOCK_D, D, ACC,
                PRECISION, EVEN_M, EVEN_N or PEEL, EVEN_D, SHIFT=SHIFT and not PEEL)
        if flw < fl:  # its tile that reaches into the band
            dq, dqa, dql, dqr, carry, far = _dq_tile(
                dq, dqa, dql, dqr, carry, far, q, do, K, V, koff, flw, WOFF, offs_m, pos_i, i0, b, h, bh, pid_m, T, S,
                NDIST, first0, skt, svt, qk_scale, slope2, KB, BIAS2, QA2, DPB, qa_rows, row, lse, delta_far, DTABLE,
                clip, 0, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, TABLE_GRAD, RI, BLOCK_M, BLOCK_NF, BLOCK_D, D, ACC,
                PRECISION, EVEN_M, EVEN_N, EVEN_D, 0, fl, True, SHIFT=SHIFT)
        if not CAUSAL:  # far-right
            row = _rows_term(offs_m, i0, h, T, S, WL, WR, slope2, BIAS2, QA2, qa_rows, R, 2, BIAS, KEYS, ACC)
            if VALUES:
                delta_far = delta - tl.load(DPB + qa_rows + R - 1, mask=offs_m < T, other=0.0)
            frw = ((fr + BLOCK_NF - 1) // BLOCK_NF) * BLOCK_NF
            if fr < frw:  # its tile that reaches into the band
                dq, dqa, dql, dqr, carry, far = _dq_tile(
                    dq, dqa, dql, dqr, carry, far, q, do, K, V, koff, frw - BLOCK_NF, WOFF, offs_m, pos_i, i0, b, h, bh, pid_m, T,
                    S, NDIST, first0, skt, svt, qk_scale, slope2, KB, BIAS2, QA2, DPB, qa_rows, row, lse, delta_far,
                    DTABLE, clip, 2, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, TABLE_GRAD, RI, BLOCK_M, BLOCK_NF, BLOCK_D,
                    D, ACC, PRECISION, EVEN_M, EVEN_N, EVEN_D, fr, hi, True, SHIFT=SHIFT)
            rw = _whole(frw, hi, PEEL, BLOCK_NF)
            for n0 in range(frw, rw, BLOCK_NF):  # whole tiles, then the partial one moved back (PEEL)
                dq, dqa, dql, dqr, carry, far = _dq_tile(
                    dq, dqa, dql, dqr, carry, far, q, do, K, V, koff, n0, WOFF, offs_m, pos_i, i0, b, h, bh, pid_m, T,
                    S, NDIST, first0, skt, svt, qk_scale, slope2, KB, BIAS2, QA2, DPB, qa_rows, row, lse, delta_far,
                    DTABLE, clip, 2, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, TABLE_GRAD, RI, BLOCK_M, BLOCK_NF, BLOCK_D,
                    D, ACC, PRECISION, EVEN_M, EVEN_N or PEEL, EVEN_D, SHIFT=SHIFT and not PEEL)
            if PEEL:
                if rw < hi:
                    dq, dqa, dql, dqr, carry, far = _dq_tile(
                        dq, dqa, dql, dqr, carry, far, q, do, K, V, koff, rw, WOFF, offs_m, pos_i, i0, b, h, bh, pid_m,
                        T, S, NDIST, first0, skt, svt, qk_scale, slope2, KB, BIAS2, QA2, DPB, qa_rows, row, lse,
                        delta_far, DTABLE, clip, 2, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, TABLE_GRAD, RI, BLOCK_M,
                        BLOCK_NF, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N, EVEN_D, SHIFT=True)
        zero = tl.zeros((BLOCK_M,), ACC)
        for n0 in range(fl, fr, BLOCK_N):  # band
            dq, dqa, dql, dqr, carry, far = _dq_tile(
                dq, dqa, dql, dqr, carry, far, q, do, K, V, koff, n0, WOFF, offs_m, pos_i, i0, b, h, bh, pid_m, T, S,
                NDIST, first0, skt, svt, qk_scale, slope2, KB, BIAS2, QA2, DPB, qa_rows, zero, lse, delta, DTABLE, clip,
                1, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, TABLE_GRAD, RI, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC,
                PRECISION, EVEN_M, EVEN_N, EVEN_D, SHIFT=SHIFT and SHIFT_BAND)
    if KEYS:  # QA = scale q w_K^T: dq += dQA w_K (scaled with the rest below); the right edge's dQA in
        # column R - 2 (table row R - 1: RI >= 2k = R - 1 columns, the interior's end at 2k - 1), in the dots;
        # d w_K = scale dQA^T q, this program's share (q's rows past T are zeros), rows 1 .. R - 1 by the
        # dot, row 0 as a sum
        r = tl.arange(0, RI)
        d_ok = (offs_d < D)[None, :]
        dqa = tl.where((r == R - 2)[None, :], dqr[:, None], dqa)
        w_in = tl.load(WK + (1 + r)[:, None] * D + offs_d[None, :], mask=(r < R - 1)[:, None] & d_ok,
                       other=0.0).to(ACC)
        w_left = tl.load(WK + offs_d, mask=offs_d < D, other=0.0).to(ACC)
        qf = q.to(ACC)
        # d w_K's share as q^T dQA (BLOCK_D rows: Hopper's 64-row warp-group dot, ``WGMMA``), else dQA^T q
        if HALF_BINS:
            d_half = dqa.to(q.dtype)
            dq = _dot_table(d_half, w_in, dq, q, ACC, KEYS_PRECISION, TABLE_TF32, HALF_BINS)
            if WGMMA:
                dw = tl.dot(tl.trans(q), d_half, out_dtype=ACC)
            else:
                dw = tl.dot(tl.trans(d_half), q, out_dtype=ACC)
        elif KEYS_PRECISION == "tf32x3":  # q (fp16 / bf16) is exact in tf32: dQA alone is split, once for both
            d_hi, d_lo = _tf32_parts(dqa)
            if TABLE_TF32:  # the table too: two dots
                dq = tl.dot(d_hi, w_in, tl.dot(d_lo, w_in, dq, out_dtype=ACC, input_precision="tf32"),
                            out_dtype=ACC, input_precision="tf32")
            else:
                dq = tl.dot(dqa, w_in, dq, out_dtype=ACC, input_precision="tf32x3")
            if WGMMA:
                dw = tl.dot(tl.trans(qf), d_hi, tl.dot(tl.trans(qf), d_lo, out_dtype=ACC, input_precision="tf32"),
                            input_precision="tf32")
            else:
                dw = tl.dot(tl.trans(d_hi), qf, tl.dot(tl.trans(d_lo), qf, out_dtype=ACC, input_precision="tf32"),
                            input_precision="tf32")
        else:
            dq = tl.dot(dqa, w_in, dq, out_dtype=ACC, input_precision=KEYS_PRECISION)
            if WGMMA:
                dw = tl.dot(tl.trans(qf), dqa, out_dtype=ACC, input_precision=KEYS_PRECISION)
            else:
                dw = tl.dot(tl.trans(dqa), qf, out_dtype=ACC, input_precision=KEYS_PRECISION)
        dq += dql[:, None] * w_left[None, :]
    tl.store(DQ + bh * T * D + offs_m[:, None] * D + offs_d[None, :], (dq * (qk_scale * 0.6931471805599453))
             .to(DQ.dtype.element_ty), mask=q_mask)
    if KEYS:
        part = DWK + (bh * tl.num_programs(1) + pid_m) * R * D
        if WGMMA:  # (BLOCK_D, RI)
            tl.store(part + (1 + r)[None, :] * D + offs_d[:, None], dw * (qk_scale * 0.6931471805599453),
                     mask=(r < R - 1)[None, :] & (offs_d < D)[:, None])
        else:  # (RI, BLOCK_D)
            tl.store(part + (1 + r)[:, None] * D + offs_d[None, :], dw * (qk_scale * 0.6931471805599453),
                     mask=(r < R - 1)[:, None] & (offs_d < D)[None, :])
        if HALF_BINS and WGMMA:
            e0 = tl.where((tl.arange(0, 16) == 0)[None, :], dql[:, None], 0.0).to(q.dtype)
            left_row = tl.sum(tl.dot(tl.trans(q), e0, out_dtype=ACC), 1)
        else:
            left_row = tl.sum(dql[:, None] * qf, 0)
        tl.store(part + offs_d, left_row * (qk_scale * 0.6931471805599453), mask=offs_d < D)
    if TABLE_GRAD:
        cell = (bh * tl.num_programs(1) + pid_m) * 2
        if WGMMA and EVEN_N:
            if CAUSAL:  # no far-right stage
                tl.store(DFAR + cell, tl.sum(far_left, 0))
                tl.store(DFAR + cell + 1, 0.0)
            else:  # both cells from one reduction across rows
                tl.store(DFAR + cell + tl.arange(0, 2), tl.sum(tl.join(far_left, tl.sum(far, 1)), 0))
        else:
            tl.store(DFAR + cell, far_left)
            if CAUSAL:  # no far-right stage
                tl.store(DFAR + cell + 1, 0.0)
            else:
                tl.store(DFAR + cell + 1, tl.sum(tl.sum(far, 1), 0))
        # the last band tile's unwrapped sums (zeros without a band); the band wrote [lo - BLOCK_N, end),
        # the rest of the row is zeroed
        lo = fl - i0 + woff
        end = lo + ((fr - fl + BLOCK_N - 1) // BLOCK_N) * BLOCK_N
        row0 = (bh * tl.num_programs(1) + pid_m) * NDIST
        tl.store(DTABLE + row0 + end - BLOCK_N + tl.arange(0, BLOCK_N), carry)
        cols = tl.arange(0, NWIN)
        tl.store(DTABLE + row0 + cols, tl.zeros((NWIN,), DTABLE.dtype.element_ty),
                 mask=(cols < NDIST) & ((cols < lo - BLOCK_N) | (cols >= end)))


@triton.jit
def _dkv_tile(dk, dv, k, v, Q, DO, qoff, dooff, m0, n0, offs_n, b, h, bh, T, S, first0, start, sq, sdo, qk_scale,
              slope2, KB, BIAS2, QA2, DPB, LSE, DELTA, LSEF, DELTAF, R, clip, WL, WR, far_row, far_side,
              KIND: tl.constexpr, BIAS: tl.constexpr, KEYS: tl.constexpr, VALUES: tl.constexpr,
              CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_D: tl.constexpr, D, ACC: tl.constexpr, PRECISION: tl.constexpr, EVEN_M: tl.constexpr,
              EVEN_N: tl.constexpr, EVEN_D: tl.constexpr, DP_FIRST: tl.constexpr = False, SHIFT: tl.constexpr = False):
    """One query tile of a key tile, transposed as the tutorial's backward is (keys as rows,
    queries as columns: P^T and dS^T are the A operands of dv's and dk's dots as they are,
    no transpose through shared memory). ``DP_FIRST``: dP's dot before P and dv's (fewer
    registers at once). ``SHIFT``: the last query tile moved back to end at T (:func:`_shift`), the queries it
    shares with the tile before given a log-sum-exp of +inf (P 0)."""
    keep_lo = 0
    keep_hi = T
    if SHIFT:
        m0, keep_lo, keep_hi = _shift(m0, T, 0, T, False, BLOCK_M)
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    pos_i = start + offs_m
    i0 = start + m0
    q = _load_rows(Q + qoff + offs_m[:, None] * sq + offs_d[None, :], offs_m, T, offs_d, D, EVEN_M or SHIFT, EVEN_D)
    do = _load_rows(DO + dooff + offs_m[:, None] * sdo + offs_d[None, :], offs_m, T, offs_d, D, EVEN_M or SHIFT, EVEN_D)
    if KIND == 3 and (EVEN_M or SHIFT):  # the merged far loop: the rows' vectors from the tile's scalar base (fewer address instructions;
        # in the other loops this form cost more)
        lse = _row_vector((LSE + bh * T + m0) + tl.arange(0, BLOCK_M), offs_m, T, float("inf"), EVEN_M or SHIFT)
        delta = _row_vector((DELTA + bh * T + m0) + tl.arange(0, BLOCK_M), offs_m, T, 0.0, EVEN_M or SHIFT)
    else:
        lse = _row_vector(LSE + bh * T + offs_m, offs_m, T, float("inf"), EVEN_M or SHIFT)
        delta = _row_vector(DELTA + bh * T + offs_m, offs_m, T, 0.0, EVEN_M or SHIFT)
    qa_rows = (bh * T + offs_m) * R
    if KIND == 3:  # a far tile of either side (far_side 1: keys right of the queries, 0: left): its per-row
        # terms, a bias by bucket's edge (far_row) or Shaw's edges, from backward_delta
        if KEYS:
            lse = _row_vector((LSEF + (2 * bh + far_side) * T + m0) + tl.arange(0, BLOCK_M), offs_m, T,
                              float("inf"), EVEN_M or SHIFT)
        if VALUES:
            delta = tl.load(DELTAF + (2 * bh + far_side) * T + offs_m, mask=offs_m < T, other=0.0)
        if BIAS == 1:
            lse -= far_row
    if KIND == 0 or KIND == 2:  # the far tiles' per-row terms; Shaw's from backward_delta (per row once, not per tile)
        far = (2 * bh + KIND // 2) * T + offs_m
        if KEYS:
            lse = _row_vector(LSEF + far, offs_m, T, float("inf"), EVEN_M or SHIFT)
        if BIAS != 0:
            lse -= _rows_term(offs_m, i0, h, T, S, WL, WR, slope2, BIAS2, QA2, qa_rows, R, KIND, BIAS, False, ACC)
        if VALUES:  # masked on whole tiles too: unmasked, relpos kv's causal backward_kv spills 16 B on sm_90
            delta = tl.load(DELTAF + far, mask=offs_m < T, other=0.0)
    if SHIFT:  # the queries the tile shares with the one before: counted there
        lse = tl.where(offs_m >= keep_lo, lse, float("inf"))
    # padded keys: their rows of dk, dv zeroed at the end; keys past S (read as zeros) not stored
    sT = tl.dot(k, tl.trans(q), out_dtype=ACC, input_precision=PRECISION)
    if BIAS == 2 and KIND != 1:  # alibi's per-key part in far tiles
        if KIND == 0:
            xT = sT * qk_scale + (slope2 * _offsets(n0 - i0, BLOCK_N, ACC))[:, None]
        else:
            xT = sT * qk_scale - (slope2 * _offsets(n0 - i0, BLOCK_N, ACC))[:, None]
    else:
        xT = sT * qk_scale
    if KIND == 1:
        dist = offs_n[:, None] - pos_i[None, :]
        inside = (offs_n < S)[:, None] & (offs_m < T)[None, :]
        whole = (EVEN_M or SHIFT) and EVEN_N  # Shaw's QA then read here, unmasked, from the tile's scalar base (int32
        # offsets: fewer registers than _band's masked read)
        xT = _band(xT, dist, inside, n0, i0, h, S, first0, slope2, BIAS2, QA2, qa_rows, clip, BIAS,
                   KEYS and not whole, CAUSAL, BLOCK_M, BLOCK_N, True)
        if KEYS and whole:
            r = tl.minimum(tl.maximum(dist + clip, 0), 2 * clip)
            xT += tl.load((QA2 + (bh * T + m0) * R) + (tl.arange(0, BLOCK_M)[None, :] * R + r)).to(xT.dtype)
    if DP_FIRST:
        dpT = tl.dot(v, tl.trans(do), out_dtype=ACC, input_precision=PRECISION)
        pT = tl.exp2(xT - lse[None, :])
        dv += tl.dot(pT.to(do.dtype), do, out_dtype=ACC, input_precision=PRECISION)
    else:
        pT = tl.exp2(xT - lse[None, :])
        dv += tl.dot(pT.to(do.dtype), do, out_dtype=ACC, input_precision=PRECISION)
        dpT = tl.dot(v, tl.trans(do), out_dtype=ACC, input_precision=PRECISION)
    if VALUES and KIND == 1:
        r = tl.minimum(tl.maximum(dist + clip, 0), 2 * clip)  # _band's index of QA: computed once for both
        if (EVEN_M or SHIFT) and EVEN_N:  # unmasked, from the tile's scalar base, as QA above
            dpT += tl.load((DPB + (bh * T + m0) * R) + (tl.arange(0, BLOCK_M)[None, :] * R + r))
        else:
            dpT += tl.load(DPB + qa_rows[None, :] + r, mask=inside, other=0.0)
    dsT = pT * (dpT - delta[None, :])
    dk += tl.dot(dsT.to(q.dtype), q, out_dtype=ACC, input_precision=PRECISION)
    return dk, dv


@triton.jit
def backward_kv(Q, K, V, DO, LSE, DELTA, LSEF, DELTAF, DK, DV, DPB, KB, BIAS2, SLOPES2, QA2,
                sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sdb, sdh, sdt,
                qk_scale, T, S, H, D, start, R, clip, WL, WR, NDIST, B0, BROW,
                BIAS: tl.constexpr, KEYS: tl.constexpr, VALUES: tl.constexpr, CAUSAL: tl.constexpr,
                HAS_PAD: tl.constexpr, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_D: tl.constexpr, ACC: tl.constexpr, PRECISION: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
              EVEN_D: tl.constexpr, MERGE_FAR: tl.constexpr = False, FEW_REGS: tl.constexpr = False,
              SHIFT: tl.constexpr = False, SHIFT_BAND: tl.constexpr = True):
    """One key tile: dk, dv over every query tile that sees it (delta, LSEF and DELTAF from
    :func:`backward_delta`). A key's dk and dv rows depend on its own probabilities only: the
    padding is not applied per pair here, padded keys' rows are zeroed at the end (and keys
    past S, read as zeros, are not stored). ``MERGE_FAR`` (a bias by bucket or Shaw's terms,
    non-causal: one value a side per row): the far tiles of both sides in one loop before the band,
    one pipeline prologue less. ``FEW_REGS`` (set with the blocks that need it, see
    ``triton_configs.choose``): fewer registers live at once, dP's dot first in each tile and the
    padding read before the loops (as bytes), so that t5bias's 32 x 128 tiles on 4 warps and Shaw's
    key term's 64 x 128 on 8 do not spill."""
    bh = tl.program_id(0)
    pid_n = tl.program_id(1)
    b = bh // H
    h = bh % H
    if BIAS == 1:  # distance 0 in the head's first copy (8 copies of BROW a head, see _band)
        BIAS2 += h * 8 * BROW + B0
    n0 = pid_n * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    kv_mask = (offs_n < S)[:, None] & (offs_d < D)[None, :]
    k = tl.load(K + b * skb + h * skh + offs_n[:, None] * skt + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + b * svb + h * svh + offs_n[:, None] * svt + offs_d[None, :], mask=kv_mask, other=0.0)
    keep8 = tl.zeros((BLOCK_N,), tl.int8)
    if HAS_PAD and FEW_REGS:  # the padding read before the loops, kept as bytes: no batch index after them
        keep8 = (tl.load(KB + b * S + offs_n, mask=offs_n < S, other=0.0) == 0).to(tl.int8)
    qoff = b * sqb + h * sqh
    dooff = b * sdb + h * sdh
    first0 = _bias_first(n0 - start, BROW, BLOCK_M)
    slope2 = 0.0
    if BIAS == 2:
        slope2 = tl.load(SLOPES2 + h).to(ACC)
    dk = tl.zeros((BLOCK_N, BLOCK_D), ACC)
    dv = tl.zeros((BLOCK_N, BLOCK_D), ACC)
    m_lo = 0
    if CAUSAL:  # queries left of the tile's first key see none of it
        m_lo = (tl.maximum(0, n0 - start) // BLOCK_M) * BLOCK_M
    a, c = _q_stages(n0, start, m_lo, T, WL, WR, BLOCK_M, BLOCK_N, SPLIT, CAUSAL)
    if SHIFT:  # the far-right tiles whole: a partial last one goes to the band (exact for any pair)
        a = tl.minimum(a, tl.maximum(m_lo, (T // BLOCK_M) * BLOCK_M))
    lw = _whole(c, T, SHIFT, BLOCK_M)  # SHIFT: the far-left loop's whole tiles, the partial one after it
    if MERGE_FAR:  # far-right and far-left tiles in one loop (one pipeline prologue), the side's terms chosen per
        # tile (a bias by bucket or Shaw's terms, non-causal)
        far_r = 0.0
        far_l = 0.0
        if BIAS == 1:
            far_r = tl.load(BIAS2 + WR).to(ACC) * 1.4426950408889634
            far_l = tl.load(BIAS2 - WL).to(ACC) * 1.4426950408889634
        n_right = (a - m_lo + BLOCK_M - 1) // BLOCK_M
        for t in range(0, n_right + (lw - c + BLOCK_M - 1) // BLOCK_M):
            right = t < n_right
            m0 = tl.where(right, m_lo + t * BLOCK_M, c + (t - n_right) * BLOCK_M)
            dk, dv = _dkv_tile(dk, dv, k, v, Q, DO, qoff, dooff, m0, n0, offs_n, b, h, bh, T, S, first0, start, sqt,
                               sdt, qk_scale, slope2, KB, BIAS2, QA2, DPB, LSE, DELTA, LSEF, DELTAF, R, clip, WL, WR,
                               tl.where(right, far_r, far_l), tl.where(right, 1, 0), 3, BIAS, KEYS, VALUES, CAUSAL,
                               HAS_PAD, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC, PRECISION, EVEN_M or SHIFT, EVEN_N, EVEN_D,
                               FEW_REGS)
        if SHIFT:
            if lw < T:
                dk, dv = _dkv_tile(dk, dv, k, v, Q, DO, qoff, dooff, lw, n0, offs_n, b, h, bh, T, S, first0, start,
                                   sqt, sdt, qk_scale, slope2, KB, BIAS2, QA2, DPB, LSE, DELTA, LSEF, DELTAF, R, clip,
                                   WL, WR, far_l, 0, 3, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, BLOCK_M, BLOCK_N, BLOCK_D,
                                   D, ACC, PRECISION, EVEN_M, EVEN_N, EVEN_D, FEW_REGS, SHIFT=True)
    if not MERGE_FAR:
        for m0 in range(m_lo, a, BLOCK_M):  # far-right: the keys right of every query (whole tiles)
            dk, dv = _dkv_tile(dk, dv, k, v, Q, DO, qoff, dooff, m0, n0, offs_n, b, h, bh, T, S, first0, start, sqt, sdt,
                               qk_scale, slope2, KB, BIAS2, QA2, DPB, LSE, DELTA, LSEF, DELTAF, R, clip, WL, WR, 0.0, 0, 2, BIAS, KEYS, VALUES, CAUSAL,
                               HAS_PAD, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC, PRECISION, EVEN_M or SHIFT, EVEN_N, EVEN_D, FEW_REGS)
    for m0 in range(a, c, BLOCK_M):  # band
        dk, dv = _dkv_tile(dk, dv, k, v, Q, DO, qoff, dooff, m0, n0, offs_n, b, h, bh, T, S, first0, start, sqt, sdt,
                           qk_scale, slope2, KB, BIAS2, QA2, DPB, LSE, DELTA, LSEF, DELTAF, R, clip, WL, WR, 0.0, 0, 1, BIAS, KEYS, VALUES, CAUSAL,
                           HAS_PAD, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC, PRECISION, EVEN_M, EVEN_N, EVEN_D, FEW_REGS,
                           SHIFT=SHIFT and SHIFT_BAND)
    if not MERGE_FAR:
        for m0 in range(c, lw, BLOCK_M):  # far-left (every tile when no term splits): whole tiles, then the partial one
            dk, dv = _dkv_tile(dk, dv, k, v, Q, DO, qoff, dooff, m0, n0, offs_n, b, h, bh, T, S, first0, start, sqt, sdt,
                               qk_scale, slope2, KB, BIAS2, QA2, DPB, LSE, DELTA, LSEF, DELTAF, R, clip, WL, WR, 0.0, 0, 0, BIAS, KEYS, VALUES, CAUSAL,
                               HAS_PAD, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC, PRECISION, EVEN_M or SHIFT, EVEN_N, EVEN_D, FEW_REGS)
        if SHIFT:  # moved back (SHIFT)
            if lw < T:
                dk, dv = _dkv_tile(dk, dv, k, v, Q, DO, qoff, dooff, lw, n0, offs_n, b, h, bh, T, S, first0, start, sqt,
                                   sdt, qk_scale, slope2, KB, BIAS2, QA2, DPB, LSE, DELTA, LSEF, DELTAF, R, clip, WL, WR,
                                   0.0, 0, 0, BIAS, KEYS, VALUES, CAUSAL, HAS_PAD, BLOCK_M, BLOCK_N, BLOCK_D, D, ACC,
                                   PRECISION, EVEN_M, EVEN_N, EVEN_D, FEW_REGS, SHIFT=True)
    if HAS_PAD:  # a padded key's probabilities are 0: its dk, dv rows too (not masked per pair above)
        if FEW_REGS:
            keep = (keep8 != 0)[:, None]
        else:
            keep = (tl.load(KB + b * S + offs_n, mask=offs_n < S, other=0.0) == 0)[:, None]
        dk = tl.where(keep, dk, 0.0)
        dv = tl.where(keep, dv, 0.0)
    out_off = bh * S * D + offs_n[:, None] * D + offs_d[None, :]
    tl.store(DK + out_off, (dk * (qk_scale * 0.6931471805599453)).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + out_off, dv.to(DV.dtype.element_ty), mask=kv_mask)
