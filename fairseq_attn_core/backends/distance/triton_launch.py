"""The launchers of the Triton distance kernels (:mod:`.triton_kernels`) and their autograd
Function: ``softmax(scale q k^T + term(j - i)) v (+ Shaw's value term)`` for a declaration
with a bias of the distance (t5bias's table by bucket, alibi's slopes) or Shaw's tables
(relpos k, kv, tied), with the tables' gradients.

What depends only on the declaration and the shape is made once per (device, shape) and
cached (:func:`_shape_tables`): the bucket of every distance the call has, ``j - i = -(S -
1) .. T - 1``, computed on the CPU by the declaration's own bucket function (T5's float32
logarithm of another library could land a distance on the neighbouring bucket at a boundary,
this way the kernel's buckets are the piece's), the one-hot matrix of the distances
backward_q sums (the table's gradient is one matmul of the kernel's per-distance sums; made
on the first backward, for its window of distances only), the edges of the far stages (the distances
beyond which the bucket no longer changes) and alibi's slopes in base 2: no host-device copy,
hence no synchronisation, on later calls. Per call, torch makes the table's bias per
distance (one gather, in 8 shifted copies: :func:`_bias_rows`), the padding as a column of 0 /
-inf, and Shaw's tables in the accumulator's dtype (the forward's key table in q's when it has
it). The kernels make Shaw's products themselves (QA is never rounded to fp16: a table in q's
dtype meets q in one fp16 / bf16 dot, exact products summed in float32; other tables in fp16 /
bf16 are exact in tf32, so their products with q or dO are one tf32 dot; a float32 operand is
split in two tf32 parts; PB and dQA meet a table in q's dtype rounded to it, as FA2 rounds P and dS,
in one half-precision dot): the forward writes ``QA log2(e) =
scale log2(e) q w_K^T`` (B H,
T, 2k + 1), read by the backward kernels; ``backward_q`` adds dq's share ``scale dQA w_K``
before rounding dq and writes each program's share of ``d w_K = scale dQA^T q`` (dQA: dS summed
per table row), which torch sums over the programs (one small sum). Shaw's value term: the
forward kernel returns PB (B H, T, 2k + 1), each query's probability mass per clipped
distance, and adds ``PB a_V`` to the output before rounding it once (delta, FA2's, is made from
that output); ``backward_delta`` makes ``dPB = dO a_V^T``, which the other kernels read by
distance into dP, and its programs' shares of ``d a_V = PB^T dO``, summed by torch.

q, k, v and dO are read through their strides (the layer's permuted views, no copies; the
last dimension must be contiguous, else it is copied). Inputs in fp16 or bf16 (the kernels
accumulate in float32), or float32 / float64 (the CPU tests under ``TRITON_INTERPRET=1``:
float64 accumulators for float64 inputs). triton is imported when a call first runs
(:func:`kernels`): this module imports without it.
"""

import dataclasses
from types import ModuleType
from typing import Optional

import torch
from torch import Tensor

from .terms import DistanceTerms
from .triton_configs import BlockConfig, Form, KernelConfigs, choose, configs_for, even, far_tiles_merged, head_block

HALF = (torch.float16, torch.bfloat16)
LOG2E = 1.4426950408889634
#: (kind, declaration's key, S, T, device, dtype) -> tables, least recently used dropped first. A
#: training run meets every length of its batches again and again: the bound holds one per length
#: up to 256 for encoder and decoder (t5bias: about 0.1 MB a shape at L = 256 or 1024, 51 MB in all)
_TABLES: dict = {}
_MAX_TABLES = 512
#: the kernels' offsets are 32-bit (Triton's int32 products of positions and strides)
MAX_OFFSET = 2 ** 31 - 1


def kernels() -> ModuleType:
    """The compiled kernels' module (imports triton)."""
    from . import triton_kernels
    return triton_kernels


def triton_attention(terms: DistanceTerms, q: Tensor, k: Tensor, v: Tensor, scale: float,
                     key_padding_mask: Optional[Tensor] = None, causal: bool = False,
                     configs: Optional[KernelConfigs] = None, module: Optional[ModuleType] = None) -> Tensor:
    """``terms`` (a bias table by bucket, slopes, or Shaw's tables) through the Triton
    kernels, (B, H, T, D) in q's dtype. q (B, H, T, D) at positions ``S - T .. S - 1``; k, v
    (B, H, S, D); key_padding_mask (B, S) True = pad; ``causal``: no key right of its query
    (the decoder). ``configs``: the kernels' blocks (default by head size,
    :mod:`.triton_configs`); ``module``: the kernels (default :func:`kernels`)."""
    if not terms.form.triton:
        raise ValueError("triton_attention: the Triton kernels run a bias of the distance or Shaw's tables, not both")
    configs = configs or configs_for(q.size(-1), torch.cuda.get_device_capability(q.device)
                                     if q.device.type == "cuda" else None)
    _check_offsets(q, k, v, terms.clip or 0, configs)
    module = module or kernels()
    B, H, T, D = q.shape
    S = k.size(2)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    shape = _shape_tables(terms, H, S, T, q.device, acc)
    kb = None
    if key_padding_mask is not None:
        kb = torch.where(key_padding_mask, float("-inf"), 0.0).to(acc)  # one op (float32 as made, acc's in the tests)
    return _TritonAttention.apply(q, k, v, terms.bias_table, terms.key_table, terms.value_table, kb, shape,
                                  terms.clip or 0, causal, float(scale), configs, module)


def _check_offsets(q: Tensor, k: Tensor, v: Tensor, clip: int, configs: KernelConfigs) -> None:
    """Refuses, in one line, a call whose tensors the kernels would index past :data:`MAX_OFFSET`: their offsets
    would wrap silently. The largest are q, k, v through their strides, the outputs (B H, T or S, head block), the
    (B H, T, 2k + 1) tables of Shaw's terms and their gradients' shares (one (2k + 1, head block) a program of the
    fewest rows ``configs`` may run)."""
    B, H, T, D = q.shape
    S = k.size(2)
    R = 2 * clip + 1
    rows = min(c.block_m for c in (configs.backward_q, configs.backward_q_terms, configs.backward_q_table,
                                   configs.backward_delta) if c is not None)
    spans = [1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride())) for t in (q, k, v)]
    need = max(*spans, B * H * max(T, S) * max(head_block(D), R), B * H * -(-T // rows) * R * head_block(D))
    if need > MAX_OFFSET:
        raise ValueError(f"the Triton distance kernels index with 32-bit offsets: this call (B {B}, H {H}, T {T}, "
                         f"S {S}, head size {D}) needs {need:,}, above {MAX_OFFSET:,}; run fewer tokens a batch, or "
                         f"--attn-backend auto")


def _shape_tables(terms: DistanceTerms, H: int, S: int, T: int, device, acc) -> dict:
    """What the kernels need of the declaration at this shape, made once per device and
    shape: ``bias`` (the kernels' BIAS: 0 none, 1 a table per distance, 2 slopes), the far
    stages' edges ``WL``, ``WR`` (every pair at ``j - i <= -WL`` has one term per row, as
    every pair at ``j - i >= WR``), and per kind the bucket index and the one-hot rows of its
    first and last (the far stages' buckets; the band's rows are made for backward_q's window,
    :func:`_window_onehot`), or the slopes in base 2."""
    if terms.bias_table is not None:
        key = ("buckets", terms.bucket, terms.bias_table.size(0))
    elif terms.slopes is not None:
        key = ("slopes", tuple(terms.slopes))
    else:
        key = ("clip", terms.clip)
    key += (S, T, str(device), acc)
    got = _TABLES.pop(key, None)
    if got is not None:
        _TABLES[key] = got  # the most recently used last
        return got
    got = dict(bias=0, WL=0, WR=0, bucket=None, edges=None, slopes2=None)
    if terms.bias_table is not None:
        bucket = terms.bucket(torch.arange(1 - S, T)).long()  # on the CPU: no device copy to read back
        run_left = int((bucket != bucket[0]).nonzero()[0, 0]) if (bucket != bucket[0]).any() else S + T - 1
        run_right = int((bucket.flip(0) != bucket[-1]).nonzero()[0, 0]) if (bucket != bucket[-1]).any() else S + T - 1
        edges = _onehot(bucket[[0, -1]], terms.bias_table.size(0), acc)
        got.update(bias=1, WL=S - run_left, WR=T - run_right, bucket=bucket.to(device), edges=edges.to(device))
    elif terms.slopes is not None:
        got.update(bias=2, slopes2=torch.tensor([s * LOG2E for s in terms.slopes], dtype=acc).to(device))
    else:
        got.update(WL=terms.clip, WR=terms.clip)
    if len(_TABLES) >= _MAX_TABLES:
        _TABLES.pop(next(iter(_TABLES)))
    _TABLES[key] = got
    return got


def _launch_args(q: Tensor, module: ModuleType):
    """(accumulator dtype, dot precision) of the kernels for q's dtype."""
    tl = module.tl
    if q.dtype in HALF:
        return tl.float32, "tf32"  # the precision is read for float32 operands only
    if q.dtype == torch.float32:
        return tl.float32, "ieee"
    if q.dtype == torch.float64:
        return tl.float64, "ieee"
    raise ValueError(f"the Triton distance kernels take fp16, bf16, float32 or float64 (got {q.dtype})")


def _tables_tf32(q: Tensor, *tables) -> bool:
    """Whether Shaw's tables are exact in tf32 where the kernels' dots with them run in tf32:
    fp16 / bf16 inputs and tables (their products with q or dO are then one exact tf32 dot,
    with PB or dQA two: only the float32 operand is split)."""
    return q.dtype in HALF and all(t is None or t.dtype in HALF for t in tables)


def _half_bins(q: Tensor, *tables) -> bool:
    """Whether the float32 bins (PB, dQA) are rounded to q's fp16 / bf16 for their dots with Shaw's
    tables, one half-precision dot each: where every table is in q's dtype. FA2 rounds P and dS so for
    its own dots (an interior bin is one P or dS; the right edge's dQA, a sum, is rounded once)."""
    return q.dtype in HALF and all(t is None or t.dtype == q.dtype for t in tables)


def _table_native(q: Tensor, table: Tensor) -> bool:
    """Whether a Shaw table's products with q run as they are: both in the same fp16 / bf16 dtype
    (exact products, float32 sums on tensor cores)."""
    return q.dtype in HALF and table.dtype == q.dtype


def _keys_precision(q: Tensor, common: dict) -> str:
    """The dots with Shaw's tables (float32 operands): tf32x3 for fp16 / bf16 inputs (float32's
    precision on tensor cores; where the other operand is q or dO, exact in tf32, the kernels split
    the float32 one alone: two tf32 dots), else the kernels' own. Tables in q's fp16 / bf16 dtype
    take half-precision dots instead (:func:`_half_bins`)."""
    return "tf32x3" if q.dtype in HALF else common["PRECISION"]


def _pow2(n: int) -> int:
    return max(16, 1 << (n - 1).bit_length())


def _interior(clip: int) -> int:
    """Columns of the kernels' interior bins (1 .. 2k - 1 of Shaw's table rows)."""
    return _pow2(max(2 * clip - 1, 1))


def _even(config, T: int, S: int) -> dict:
    """The kernels' EVEN_M, EVEN_N (:func:`.triton_configs.even`)."""
    return dict(zip(("EVEN_M", "EVEN_N"), even(config, T, S)))


def _rows_view(t: Tensor) -> Tensor:
    """t itself when its last dimension is contiguous (the kernels read the rest by strides)."""
    return t if t.stride(-1) == 1 else t.contiguous()


class _TritonAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, table, key_table, value_table, kb, shape, clip, causal, scale, configs, module):
        B, H, T, D = q.shape
        S = k.size(2)
        values = value_table is not None
        q, k, v = (_rows_view(t) for t in (q, k, v))
        acc, precision = _launch_args(q, module)
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        out = torch.empty(B, H, T, D, dtype=q.dtype, device=q.device)
        lse = torch.empty(B * H, T, dtype=dtype, device=q.device)  # base 2
        none = lse  # the pointer of a term the launch does not have: never read
        bias2 = none
        b0 = brow = 0
        if table is not None:
            bias2, b0, brow = _bias_rows(table, shape, S, T, configs,
                                         dtype if q.dtype not in HALF else None)
        R = 2 * clip + 1
        qa2 = wk2 = none
        native = key_table is not None and _table_native(q, key_table)
        if key_table is not None:  # QA in base 2, made by the forward kernel (times scale log2(e) there)
            # in q's dtype when the table has it (the forward's dots of q and the table as they are), else
            # in the accumulator's
            wk2 = key_table.detach().to(key_table.dtype if native else dtype).contiguous()
            qa2 = torch.empty(B * H, T, R, dtype=dtype, device=q.device)
        pb = torch.empty(B * H, T, R if values else 0, dtype=dtype, device=q.device)
        common = dict(BIAS=shape["bias"], KEYS=key_table is not None, VALUES=values, CAUSAL=causal,
                      HAS_PAD=kb is not None, SPLIT=bool(shape["bias"] or key_table is not None or causal),
                      BLOCK_D=head_block(D), EVEN_D=head_block(D) == D, ACC=acc, PRECISION=precision)
        ints = (scale * LOG2E, T, S, H, D, S - T, R, clip, shape["WL"], shape["WR"], S + T - 1, b0, brow)
        pointers = (kb if kb is not None else none, bias2, shape["slopes2"] if shape["slopes2"] is not None else none,
                    qa2)
        av = value_table.detach().to(dtype).contiguous() if values else none
        form = Form(bias=shape["bias"], keys=key_table is not None, values=values, causal=causal)
        chosen = choose(configs, form, T, S)
        c = chosen.forward
        module.forward[(B * H, _cdiv(T, c.block_m))](
            q, k, v, out, lse, pb if values else none, *pointers, wk2, av, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
            *ints, RI=_interior(clip), BLOCK_M=c.block_m, BLOCK_N=c.block_n, num_warps=c.num_warps, num_stages=c.num_stages,
            KEYS_PRECISION=_keys_precision(q, common), TABLE_TF32=_tables_tf32(q, key_table, value_table),
            TABLE_NATIVE=native, MERGE_FAR=far_tiles_merged(form, "forward"), BLOCK_NF=chosen.forward_far,
            SHIFT=chosen.forward_shift, PEEL=chosen.forward_peel, SHIFT_BAND=chosen.band_shift,
            HALF_BINS=_half_bins(q, key_table, value_table),
            **_even(c, T, S), **common)
        ctx.save_for_backward(q, k, v, out, lse, pb, *pointers, key_table, value_table)
        ctx.meta = (shape, ints, configs, module, common, form, None if table is None else table.dtype, scale)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, pb, kb, bias2, slopes2, qa2, key_table, value_table = ctx.saved_tensors
        shape, ints, configs, module, common, form, table_dtype, scale = ctx.meta
        B, H, T, D = q.shape
        S = k.size(2)
        R = ints[6]
        do = _rows_view(dout)
        dtype = lse.dtype
        none = lse
        delta = torch.empty(B * H, T, dtype=dtype, device=q.device)  # written by backward_delta
        dpb = av = none
        if common["VALUES"]:  # dPB = dO a_V^T, made by backward_delta
            dpb = torch.empty(B * H, T, R, dtype=dtype, device=q.device)
            av = value_table.detach().to(dtype).contiguous()  # (R, D): a copy of a small table
        dq = torch.empty(B, H, T, D, dtype=q.dtype, device=q.device)
        dk, dv = (torch.empty(B, H, S, D, dtype=k.dtype, device=q.device) for _ in range(2))
        table_grad = table_dtype is not None and ctx.needs_input_grad[3]
        keys = common["KEYS"]
        form = dataclasses.replace(form, table_grad=table_grad)
        blocks = choose(configs, form, T, S)
        half = _half_bins(q, key_table, value_table)
        cq, ckv = blocks.backward_q, blocks.backward_kv
        q_tiles = _cdiv(T, cq.block_m)
        if table_grad and cq.block_n < cq.block_m:
            raise ValueError("the table's gradient needs backward_q tiles with block_n >= block_m")
        # the table's per-distance sums, each program's band distances j - i at j - i + woff
        # (triton_kernels' docstring): rows as wide as the span the band tiles write, not as the length;
        # the kernel's NWIN (its zeroing's width) at least 2 (block_m + block_n), so that short lengths,
        # whose span the length cuts, share one compiled kernel
        woff, nwin = _window(shape, T, S, cq, causal=common["CAUSAL"]) if table_grad else (0, 1)
        # every cell written by backward_q (the band's sums, zeros elsewhere)
        dtable = torch.empty(B * H * q_tiles * nwin if table_grad else 1, dtype=dtype, device=q.device)
        dfar = torch.empty(B * H * q_tiles * 2 if table_grad else 1, dtype=dtype, device=q.device)
        dwk = torch.empty(B * H * q_tiles, R, D, dtype=dtype, device=q.device) if keys else none
        strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3])
        # the far tiles' per-row log-sum-exp (Shaw's key term) and delta (value term), (B H, 2, T)
        lsef = torch.empty(B * H * 2 * T, dtype=dtype, device=q.device) if keys else none
        deltaf = torch.empty(B * H * 2 * T, dtype=dtype, device=q.device) if common["VALUES"] else none
        # d a_V = PB^T dO, each backward_delta program's share
        cd = blocks.backward_delta
        d_tiles = _cdiv(T, cd.block_m)
        dav = torch.empty(B * H * d_tiles, R, D, dtype=dtype, device=q.device) if common["VALUES"] else none
        module.backward_delta[(B * H, d_tiles)](
            out, do, pb if common["VALUES"] else none, dpb, delta, lse, qa2, lsef, deltaf, av, dav, *do.stride()[:3],
            T, H, D, R, KEYS=keys, VALUES=common["VALUES"], RI=_interior(ints[7]), BLOCK_M=cd.block_m,
            BLOCK_D=common["BLOCK_D"], ACC=common["ACC"], PRECISION=_keys_precision(q, common),
            TABLE_TF32=_tables_tf32(q, key_table, value_table), HALF_BINS=half, WGMMA=configs.warpgroup_mma,
            num_warps=cd.num_warps)
        wk = key_table.detach().contiguous() if keys else none
        module.backward_q[(B * H, q_tiles)](
            q, k, v, do, lse, delta, dq, dwk, dpb, dtable, dfar, kb, bias2,
            slopes2, qa2, wk, *strides, *ints[:10], nwin, *ints[11:], woff, TABLE_GRAD=table_grad, RI=_interior(ints[7]),
            KEYS_PRECISION=_keys_precision(q, common), TABLE_TF32=_tables_tf32(q, key_table, value_table),
            NWIN=_pow2(max(nwin, 2 * (cq.block_m + cq.block_n))) if table_grad else 16, WGMMA=configs.warpgroup_mma, BLOCK_M=cq.block_m, BLOCK_N=cq.block_n,
            BLOCK_NF=blocks.backward_q_far, SHIFT=blocks.backward_q_shift, PEEL=blocks.backward_q_peel,
            SHIFT_BAND=blocks.band_shift, HALF_BINS=half,
            num_warps=cq.num_warps, num_stages=cq.num_stages, **_even(cq, T, S), **common)
        module.backward_kv[(B * H, _cdiv(S, ckv.block_n))](
            q, k, v, do, lse, delta, lsef, deltaf, dk, dv, dpb, kb, bias2, slopes2, qa2, *strides, *ints,
            BLOCK_M=ckv.block_m, BLOCK_N=ckv.block_n, num_warps=ckv.num_warps, num_stages=ckv.num_stages,
            MERGE_FAR=far_tiles_merged(form, "backward_kv"), FEW_REGS=blocks.few_regs, SHIFT=blocks.backward_kv_shift,
            SHIFT_BAND=blocks.band_shift,
            **_even(ckv, T, S), **common)
        d_table = None
        if table_grad:  # per distance, then per bucket (one matmul): no atomics
            per_window = dtable.view(B, H, q_tiles, nwin).sum((0, 2))
            lo, hi = max(0, woff - (S - 1)), min(nwin, woff + T)  # the columns of distances 1 - S .. T - 1
            far = dfar.view(B, H, q_tiles, 2).sum((0, 2))  # the far tiles' sums: the edge buckets'
            d_table = (per_window[:, lo:hi] @ _window_onehot(shape, lo - woff + S - 1, hi - woff + S - 1, dtype)
                       + far @ shape["edges"]).t().to(table_dtype).contiguous()
        d_key = d_value = None
        if keys and ctx.needs_input_grad[4]:  # d w_K = scale dQA^T q, summed over backward_q's programs
            d_key = dwk.sum(0).to(key_table.dtype)
        if common["VALUES"] and ctx.needs_input_grad[5]:  # d a_V = PB^T dO, summed over backward_delta's programs
            d_value = dav.sum(0).to(value_table.dtype)
        return (dq, dk, dv, d_table, d_key, d_value) + (None,) * 7


def _window(shape: dict, T: int, S: int, config: BlockConfig, causal: bool):
    """(woff, nwin): backward_q's row of per-distance sums holds distance ``j - i`` at column ``j - i +
    woff``, ``nwin`` columns: the span its programs' band tiles write (the wrapped sums of the first,
    ``block_n`` left of the band, to the end of the last), from a mirror of the kernel's ``_stages``;
    made once per shape and blocks."""
    key = ("window", config.block_m, config.block_n, causal)
    if key not in shape:
        bm, bn, WL, WR = config.block_m, config.block_n, shape["WL"], shape["WR"]
        left = right = 0
        for m0 in range(0, T, bm):
            i0 = S - T + m0
            hi = min(S, i0 + bm) if causal else S
            fl = min(max(0, (max(i0 - WL + 1, 0) // bn) * bn), hi)
            fr = hi if causal else max(min(hi, ((i0 + bm - 1 + WR + bn - 1) // bn) * bn), fl)
            left = max(left, i0 - fl + bn)
            right = max(right, fl - i0 + -(-(fr - fl) // bn) * bn)
        shape[key] = (left, left + right)
    return shape[key]


def _window_onehot(shape: dict, first: int, end: int, dtype) -> Tensor:
    """The one-hot matrix (rows, buckets) of the distances ``first - (S - 1) .. end - S`` (the
    columns of backward_q's per-distance sums), made once per shape and window."""
    key = ("onehot", first, end, dtype)
    if key not in shape:
        shape[key] = _onehot(shape["bucket"][first:end], shape["edges"].size(1), dtype)
    return shape[key]


def _onehot(bucket: Tensor, buckets: int, dtype) -> Tensor:
    """(len(bucket), buckets): row r is 1 at column ``bucket[r]``."""
    return (bucket[:, None] == torch.arange(buckets, device=bucket.device)).to(dtype)


def _bias_rows(table: Tensor, shape: dict, S: int, T: int, configs: KernelConfigs, dtype=None):
    """The table's bias per distance as the kernels read it: (H, 8, BROW), copy c of a head's
    row starting c distances later (a band tile's row reads the copy that aligns its first
    key: whole vectors), distance 0 at column B0. The row holds the distances band tiles can
    reach, a block_m + block_n beyond the far stages' edges ``-WL`` and ``WR`` (past them the
    far tiles read one value a row, at ``-WL`` or ``WR``), within the call's ``1 - S .. T - 1``,
    and zeros either side (a tile reads its whole span unmasked, up to a tile's size past the
    first or last distance): its width does not grow with the length. In the table's dtype
    when ``dtype`` is None (fp16, bf16: the kernels scale it by log2(e) in float32), else in
    ``dtype``. One gather of the table with a zero row appended, by the bucket of each cell
    (made once per shape and blocks). Returns (rows, B0, BROW)."""
    blocks = [c for c in vars(configs).values() if isinstance(c, BlockConfig)]
    pad = max(max(c.block_m, c.block_n) for c in blocks) + 8
    reach = max(c.block_m + c.block_n for c in blocks) + 8
    left, right = min(S - 1, max(shape["WL"], 0) + reach), min(T - 1, max(shape["WR"], 0) + reach)
    b0 = _round16(left + pad)
    brow = _round16(b0 + right + 1 + pad)
    key = ("bias rows", b0, brow, left, right)
    if key not in shape:  # the bucket of each cell of the first copy and 8 past it (the zero row's index
        # outside -left .. right); copy c is that row from column c on
        row = torch.full((brow + 8,), table.size(0), dtype=torch.long, device=shape["bucket"].device)
        row[b0 - left: b0 + right + 1] = shape["bucket"][S - 1 - left: S + right]
        # contiguous: a view's index would make the gather's result strided; int32: half the bytes to read
        shape[key] = row.unfold(0, brow, 1)[:8].to(torch.int32).contiguous()
    rows = torch.cat([table.detach(), table.new_zeros(1, table.size(1))]).to(dtype or table.dtype)
    return rows.t()[:, shape[key]].contiguous(), b0, brow


def _round16(n: int) -> int:
    return -(-n // 16) * 16


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)
