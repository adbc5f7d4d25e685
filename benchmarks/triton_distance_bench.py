"""The Triton distance kernels (fairseq_attn_core/backends/distance/triton_*.py) on a device:
numerics against float64 and attention-level timing against today's paths and stock.

``--check``: per method (t5bias, alibi, relpos k, relpos kv; t5bias and relpos kv also under
the decoder's causal mask: :data:`CHECKS`) and dtype, the Triton path's output and the gradients of q, k, v and the tables (T5's, Shaw's)
against a dense float64 computation on the same device, norm-wise relative error, over padded batches (a sentence
with every key padded among them); fails above ``--tol`` (2e-2, the distance kernels'
half-precision tolerance of tests/test_distance_kernels_devices.py) or on a NaN. The reference
takes the same rounded inputs and tables as the kernels, so the error is the kernels' own.

``--relpos-check``: Shaw's terms again (:data:`RELPOS_CHECKS`), in each of ``--relpos-dtypes``
(fp16, bf16, fp32): at a length that is not a multiple of any block and at one of whole blocks,
with Shaw's tables in float32 beside half inputs (the kernels split the table in two tf32
parts) and in the inputs' dtype (half-precision dots, PB and dQA rounded as FA2 rounds P and dS);
the output, every gradient, and the QA
the forward stores for its band tiles and the backward (float64 reference, ``QA_TOL`` 1e-5:
a plain tf32 product of a float32 table would be off by tf32's rounding, about 5e-4).

``--time``: encoder self-attention forward + backward (B, H = 8, T, D = 64: base) at each
length, ``--tokens`` tokens per batch (16k: what an 80-140 GB card trains per step), per
path: ``stock`` (SDPA with the padding mask: no position term), ``sdpa bias`` (SDPA with the
term as a float mask, which requires grad for t5bias and relpos k: the fused path, what auto
trains alibi and relpos k through on CUDA), the distance kernels' torch mode (``distance
bias``, mode ``kernel``: what auto trains t5bias through on CUDA from 512; for relpos k the
``region split``, mode ``far``, which is also what auto trains relpos kv through: it has no
SDPA form) and ``triton``; ``rope``: the rotation of q and k alone, the piece's torch
``rotate`` against the Triton kernel (:mod:`fairseq_attn_core.rope_fused`; ``stock`` there is
``q + k``, no rotation). The protocol: ``--batches`` input sets generated before any
timing (lengths drawn per sentence, padded: WMT-like at ``wmt``), a warm-up pass of every
path over every batch (compiles, autotuning, allocator; its time and the Triton kernel
specializations it compiled are printed: :class:`CountingKernels`, ``--max-compiles``) excluded, then ``--rounds`` rounds, each running every
path over every batch in an order rotated per round (interleaved); per round the wall time
(synchronised); after the rounds, ``--profile-passes`` (1) passes of each path under
torch.profiler give the sum of device kernel time (one pass: no spread, no verdict on it). The
table gives the median per batch, the spread (max - min) / median over rounds, the peak
memory over the batch and the ratio to stock; a verdict of triton against today's path only
where the gap is larger than both spreads. Each (length, method) is printed, and the files
rewritten, as it completes: a run cut off by its time limit keeps what it measured.

``--device cpu`` with ``TRITON_INTERPRET=1`` in the environment (set before Python starts)
runs the same code on tiny shapes through Triton's interpreter (the dry device run);
float32 stands in for the half dtypes there (the interpreter's bf16 tl.dot is wrong).
"""

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fairseq_attn_core.backends.distance import DistanceTerms, distance_attention  # noqa: E402
from fairseq_attn_core.backends.distance.triton_configs import SMALL  # noqa: E402
from fairseq_attn_core.backends.distance.triton_launch import triton_attention  # noqa: E402
from fairseq_attn_core.pieces.alibi import alibi_slopes  # noqa: E402
from fairseq_attn_core.pieces.t5bias import relative_position_bucket  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
BUCKETS, MAX_DISTANCE = 32, 128  # T5's defaults
#: Shaw's clip: the issue's k = 16 on a GPU, 3 for the interpreter
CLIP = {"cuda": 16, "cpu": 3}
METHODS = ("t5bias", "alibi", "relpos_k", "relpos_kv", "rope")
#: the numerics' (method, causal): the decoder's form where it differs (T5's one-sided buckets)
#: and for the fullest kernel (each variant is one more compile of three kernels)
CHECKS = (("t5bias", False), ("t5bias", True), ("alibi", False), ("relpos_k", False), ("relpos_kv", False),
          ("relpos_kv", True))
#: Shaw's terms checked again (:func:`check_relpos`): (method, causal, length, tables: "inputs" in
#: the inputs' dtype, else a dtype), each in every dtype of --relpos-dtypes; lengths below
RELPOS_CHECKS = (("relpos_k", False, "odd", "fp32"), ("relpos_kv", False, "odd", "fp32"),
                 ("relpos_kv", False, "whole", "inputs"), ("relpos_k", False, "whole", "inputs"))
#: forms checked again at the whole length of RELPOS_LENGTHS: backward_kv's merged blocks in their FEW_REGS form run
#: only where the lengths fill their 128-key tiles (t5bias's; relpos k's is in RELPOS_CHECKS)
WHOLE_CHECKS = (("t5bias", False),)
#: a length not a multiple of any block (nor of 16), and one of whole blocks (unmasked loads; on Hopper also the wide
#: far tiles of backward_q with Shaw's terms and of the forward with the value term, triton_configs.wide_far_tiles)
RELPOS_LENGTHS = {"cuda": {"odd": 77, "whole": 512}, "cpu": {"odd": 13, "whole": 32}}
#: the stored QA against float64: float32's precision, norm-wise
QA_TOL = 1e-5
#: WMT-like batches: sentences of 16..64 tokens, padded to the batch's longest (the dry run
#: on the CPU interpreter: 4..12)
WMT = {"cuda": (16, 64), "cpu": (4, 12)}
#: heads and head size: base on a GPU, a tiny layer for the interpreter
SIZES = {"cuda": (8, 64), "cpu": (2, 8)}


class CountingKernels:
    """The kernels' module (:func:`triton_launch.kernels`) seen through a count of Triton's
    compilations: every launch's specialization, what triton keys a compiled kernel by (the
    kernel, its constexprs and launch options, each tensor's dtype and 16-byte alignment, each
    integer's being 1, a multiple of 16, within int32). One key is one compile on a GPU; the
    interpreter compiles nothing but sees the same keys, so the CPU rehearsal of the device run
    counts them. Lengths that are multiples of 16 share their kernels (512 and 1024 do)."""

    def __init__(self):
        self.keys = set()
        self._module = None

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._module is None:
            from fairseq_attn_core.backends.distance.triton_launch import kernels
            self._module = kernels()
        attr = getattr(self._module, name)
        if type(attr).__name__ in ("JITFunction", "InterpretedFunction"):
            return _Counted(self, name, attr)
        return attr


def _spec(x):
    if isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype), x.data_ptr() % 16 == 0)
    if isinstance(x, bool):
        return ("bool", x)
    if isinstance(x, int):
        return ("int", x == 1, x % 16 == 0, -2 ** 31 <= x < 2 ** 31)
    if isinstance(x, float):
        return ("float",)
    return ("value", repr(x))


class _Counted:
    def __init__(self, counter, name, kernel):
        self.counter, self.name, self.kernel = counter, name, kernel

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.counter.keys.add((self.name, tuple(_spec(a) for a in args),
                                   tuple(sorted((k, repr(v)) for k, v in kwargs.items()))))
            return self.kernel[grid](*args, **kwargs)
        return launch


#: the triton path's kernels, counted (:class:`CountingKernels`)
COUNTED = CountingKernels()


def fail(msg: str) -> None:
    print(f"triton_distance_bench: {msg}", file=sys.stderr)
    sys.exit(2)


def terms_for(method: str, H: int, tables, causal: bool) -> DistanceTerms:
    if method == "t5bias":
        return DistanceTerms(bias_table=tables[0], bucket=lambda rel: relative_position_bucket(
            rel, not causal, BUCKETS, MAX_DISTANCE))
    if method.startswith("relpos"):
        return DistanceTerms(key_table=tables[0], value_table=tables[1] if len(tables) > 1 else None,
                             clip=(tables[0].size(0) - 1) // 2)
    return DistanceTerms(slopes=tuple(alibi_slopes(H)))


def tables_for(method: str, H: int, D: int, device, g):
    """The method's learned tables in float64 on the CPU (none: alibi's fixed slopes)."""
    if method == "t5bias":
        return [torch.randn(BUCKETS, H, generator=g, dtype=torch.float64) * 0.5]
    R = 2 * CLIP[device.type] + 1
    if method.startswith("relpos"):  # (rope: no table)
        return [torch.randn(R, D, generator=g, dtype=torch.float64) * D ** -0.5
                for _ in range(2 if method == "relpos_kv" else 1)]
    return []


def padding(lengths, T, device):
    """(B, T) True = pad, each sentence right-padded to T."""
    return torch.arange(T, device=device)[None, :] >= torch.tensor(lengths, device=device)[:, None]


def dense64(terms, q, k, v, scale, kpm, causal):
    """The float64 reference: dense scores, the declaration's term, masks; a row without keys
    outputs 0."""
    pos = torch.arange(k.size(2), device=q.device)
    d = pos[None, :] - pos[:, None]
    s = torch.einsum("bhid,bhjd->bhij", q, k) * scale + terms.score_bias(q, pos, pos, scale)
    allowed = ~kpm[:, None, None, :]
    if causal:
        allowed = allowed & (d <= 0)
    has = allowed.any(-1, keepdim=True)
    s = torch.where(allowed, s, torch.where(has, float("-inf"), 0.0))
    p = torch.softmax(s, -1) * has
    value_term = terms.value_term(p, pos, pos)
    return p @ v + (0 if value_term is None else value_term)


def check(args, device, configs) -> bool:
    ok = True
    g = torch.Generator(device="cpu").manual_seed(0)
    B, (H, D) = 4, SIZES[device.type]
    # on the GPU's blocks every kernel then has far tiles on both sides (t5bias's band reaches distance 91)
    T = 456 if device.type == "cuda" else 21
    print(f"== numerics: B {B}, H {H}, T {T}, D {D}; tolerance {args.tol} (norm-wise, float64 reference)")
    for dtype_name in args.dtypes:
        for method, causal in CHECKS:
            ok &= check_form(method, causal, dtype_name, dtype_name, B, H, T, D, device, g, configs, args.tol)
        for method, causal in WHOLE_CHECKS:
            ok &= check_form(method, causal, dtype_name, dtype_name, B, H, RELPOS_LENGTHS[device.type]["whole"], D,
                             device, g, configs, args.tol)
        ok &= check_rope(DTYPES[dtype_name], dtype_name, B, H, T, D, device, g, args.tol)
    return ok


def check_relpos(args, device, configs) -> bool:
    """Shaw's terms again (:data:`RELPOS_CHECKS`) in each of ``--relpos-dtypes``: lengths not a
    multiple of any block and of whole blocks, Shaw's tables in float32 beside half inputs (the
    kernels split the table in two tf32 parts) or in the inputs' dtype (half-precision dots); the
    output and every gradient, and the QA the forward stores (:func:`qa_error`)."""
    ok = True
    g = torch.Generator(device="cpu").manual_seed(1)
    B, (H, D) = 4, SIZES[device.type]
    print(f"== Shaw's terms: B {B}, H {H}, D {D}; tolerance {args.tol}, QA's {QA_TOL} (norm-wise, float64 reference)")
    for dtype_name in args.relpos_dtypes:
        for method, causal, length, tables in RELPOS_CHECKS:
            ok &= check_form(method, causal, dtype_name, dtype_name if tables == "inputs" else tables, B, H,
                             RELPOS_LENGTHS[device.type][length], D, device, g, configs, args.tol)
    return ok


def check_form(method, causal, dtype_name, table_dtype_name, B, H, T, D, device, g, configs, tol) -> bool:
    """One form in ``dtype_name`` (its tables in ``table_dtype_name``) against float64 from the
    same rounded inputs and tables: output and every gradient; with Shaw's key term, QA."""
    dtype, table_dtype = DTYPES[dtype_name], DTYPES[table_dtype_name]
    x = [torch.randn(B, H, T, D, generator=g, dtype=torch.float64).to(dtype).double() for _ in range(4)]
    tables = [t.to(table_dtype).double() for t in tables_for(method, H, D, device, g)]
    kpm = padding([T, T - 37 % T, 5, 0], T, "cpu")  # full, padded, short, every key padded
    q, k, v, dout = (t.to(device) for t in x)
    kpm = kpm.to(device)
    leaves64 = [t.to(device).requires_grad_(True) for t in (q, k, v, *tables)]
    ref = dense64(terms_for(method, H, leaves64[3:], causal), *leaves64[:3], D ** -0.5, kpm, causal)
    ref_grads = torch.autograd.grad(ref, leaves64, dout)
    leaves = [t.to(device, dtype).requires_grad_(True) for t in (q, k, v)]
    leaves += [t.to(device, table_dtype).requires_grad_(True) for t in tables]
    out = triton_attention(terms_for(method, H, leaves[3:], causal), *leaves[:3], D ** -0.5, kpm, causal,
                           configs)
    qa = qa_error(out, q, tables[0].to(device), D ** -0.5) if method.startswith("relpos") else None
    grads = torch.autograd.grad(out, leaves, dout.to(dtype))
    errs = {}
    names = ("out", "dq", "dk", "dv", "dtable", "dtable_v")
    for name, a, e in zip(names, (out,) + grads, (ref,) + ref_grads):
        a64 = a.detach().double()
        errs[name] = float((a64 - e.detach()).norm() / e.detach().norm().clamp_min(1e-30))
        if not math.isfinite(errs[name]) or not torch.isfinite(a64).all():
            errs[name] = float("nan")
    form = f"{method}{' causal' if causal else ''} T {T}" + (f", tables {table_dtype_name}"
                                                            if table_dtype_name != dtype_name else "")
    ok = report(dtype_name, form, errs, tol)
    if qa is not None:
        ok &= report(dtype_name, form, {"QA": qa}, QA_TOL)
    return ok


def qa_error(out, q, key_table, scale) -> float:
    """The forward's stored ``QA log2(e) = scale log2(e) q w_K^T`` (B H, T, 2k + 1; the band
    tiles read it back after the barrier, the backward kernels later), kept by the autograd
    node, against float64 from the same q and table: float32's precision (a plain tf32 product
    of a float32 table would be off by tf32's rounding, 2^-11, about 5e-4)."""
    qa = out.grad_fn.saved_tensors[9].detach()
    B, H, T, D = q.shape
    ref = torch.einsum("bhtd,rd->bhtr", q.detach(), key_table.detach()).reshape(B * H, T, -1) * (scale * 1.4426950408889634)
    return float((qa.double() - ref).norm() / ref.norm())


def report(dtype_name, form, errs, tol) -> bool:
    bad = [n for n, e in errs.items() if not e <= tol]
    print(f"{dtype_name:5s} {form:16s} " + " ".join(f"{n} {e:.2e}" for n, e in errs.items())
          + ("  FAIL " + ",".join(bad) if bad else "  ok"))
    return not bad


def check_rope(dtype, dtype_name, B, H, T, D, device, g, tol) -> bool:
    """The fused rotation in ``dtype`` against the piece's ``rotate`` in float64 (queries at
    positions 3.. as a decoder's), forward and backward."""
    from fairseq_attn_core.pieces.rope import rotate
    from fairseq_attn_core.rope_fused import fused_rotate
    x, dy = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64).to(device) for _ in range(2))
    pos = torch.arange(3, 3 + T, device=device)
    x64 = x.clone().requires_grad_(True)
    ref = rotate(x64, pos, D, 10000.0)
    xh = x.to(dtype).requires_grad_(True)
    out = fused_rotate(xh, pos, D, 10000.0)
    errs = {}
    for name, a, e in (("out", out, ref), ("dx", torch.autograd.grad(out, [xh], dy.to(dtype))[0],
                                            torch.autograd.grad(ref, [x64], dy)[0])):
        a64 = a.detach().double()
        errs[name] = float((a64 - e.detach()).norm() / e.detach().norm()) if torch.isfinite(a64).all() else float("nan")
    return report(dtype_name, "rope rotation", errs, tol)


# ---------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------
def batches_for(length, n, tokens, H, D, dtype, device, g):
    """``n`` fixed batches (q, k, v, dout, kpm): ``wmt`` sentences of 16..64 tokens padded to
    the batch's longest, else every sentence ``length`` long."""
    out = []
    for _ in range(n):
        if length == "wmt":
            lo, hi = WMT[device.type]
            T = hi
            B = max(1, tokens // T)
            lens = torch.randint(lo, hi + 1, (B,), generator=g).tolist()
            T = max(lens)
        else:
            T = int(length)
            B = max(1, tokens // T)
            lens = [T] * B
        q, k, v, dout = (torch.randn(B, H, T, D, generator=g).to(device, dtype) for _ in range(4))
        out.append((q, k, v, dout, padding(lens, T, device)))
    return out


def rope_paths():
    """RoPE's rotation of q and k (their sum is the output the backward starts from): the
    piece's torch ``rotate`` against the Triton kernel; no attention."""
    from fairseq_attn_core.pieces.rope import rotate
    from fairseq_attn_core.rope_fused import fused_rotate

    def torch_rotate(q, k, v, kpm):
        pos = torch.arange(q.size(2), device=q.device)
        return rotate(q, pos, q.size(-1), 10000.0) + rotate(k, pos, k.size(-1), 10000.0)

    def triton_rotate(q, k, v, kpm):
        pos = torch.arange(q.size(2), device=q.device)
        return fused_rotate(q, pos, q.size(-1), 10000.0) + fused_rotate(k, pos, k.size(-1), 10000.0)

    return {"stock": lambda q, k, v, kpm: q + k, "torch rotate": torch_rotate, "triton": triton_rotate}


def paths_for(method, H, tables, scale, configs):
    """name -> f(q, k, v, kpm) for a forward + backward."""
    if method == "rope":
        return rope_paths()
    terms = terms_for(method, H, tables, False)

    def stock(q, k, v, kpm):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=~kpm[:, None, None, :], scale=scale)

    def sdpa_bias(q, k, v, kpm):
        pos = torch.arange(q.size(2), device=q.device)
        bias = terms.score_bias(q, pos, pos, scale)  # (1|B, H, T, T)
        mask = bias.masked_fill(kpm[:, None, None, :], float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)

    def distance_kernel(q, k, v, kpm):
        return distance_attention(terms, q, k, v, scale, "kernel", 128, kpm)[0]

    def region_split(q, k, v, kpm):
        return distance_attention(terms, q, k, v, scale, "far", 64, kpm)[0]

    def triton(q, k, v, kpm):
        return triton_attention(terms, q, k, v, scale, kpm, False, configs, COUNTED)

    if method == "relpos_kv":  # no SDPA form: auto trains it through the region split on CUDA
        return {"stock": stock, "region split": region_split, "triton": triton}
    torch_mode = ("region split", region_split) if method == "relpos_k" else ("distance bias", distance_kernel)
    return {"stock": stock, "sdpa bias": sdpa_bias, torch_mode[0]: torch_mode[1], "triton": triton}


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_all(f, batches):
    for q, k, v, dout, kpm in batches:
        leaves = [t.requires_grad_(True) for t in (q, k, v)]
        out = f(*leaves, kpm)
        out.backward(dout)
        for t in leaves:
            t.grad = None
            t.requires_grad_(False)


def kernel_seconds(f, batches, device) -> float:
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        run_all(f, batches)
        sync(device)
    events = prof.key_averages()
    if device.type == "cuda":
        total = sum(getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0) for e in events)
    else:
        total = sum(e.self_cpu_time_total for e in events)
    return total / 1e6


def time_paths(args, device, configs):
    """Yields the rows of each (dtype, length, method) as it completes."""
    g = torch.Generator().manual_seed(1)
    H, D = SIZES[device.type]
    for dtype_name in args.dtypes:
        dtype = DTYPES[dtype_name]
        for length in args.lengths:
            batches = batches_for(length, args.batches, args.tokens, H, D, dtype, device, g)
            for method in args.methods:
                rows = []
                tables = [t.to(device, dtype).requires_grad_(True) for t in tables_for(method, H, D, device, g)]
                paths = paths_for(method, H, tables, D ** -0.5, configs)
                compiled = len(COUNTED.keys)
                t0 = time.perf_counter()
                for f in paths.values():  # warm-up: compiles, autotuning, allocator (every batch: each
                    run_all(f, batches)   # batch's length may be its own specialization)
                sync(device)
                warm_s = time.perf_counter() - t0
                new = len(COUNTED.keys) - compiled
                wall = {n: [] for n in paths}
                kern = {n: [] for n in paths}
                peak = {}
                names = list(paths)
                for r in range(args.rounds):
                    order = names[r % len(names):] + names[: r % len(names)]  # interleaved, rotated
                    for n in order:
                        if device.type == "cuda":
                            torch.cuda.reset_peak_memory_stats()
                            base = torch.cuda.memory_allocated()
                        sync(device)
                        t0 = time.perf_counter()
                        run_all(paths[n], batches)
                        sync(device)
                        wall[n].append((time.perf_counter() - t0) / len(batches))
                        if device.type == "cuda":
                            peak[n] = max(peak.get(n, 0), torch.cuda.max_memory_allocated() - base)
                for _ in range(args.profile_passes):  # after the rounds: the profiler slows what it sees
                    for n in names:
                        kern[n].append(kernel_seconds(paths[n], batches, device) / len(batches))
                T = batches[0][0].size(2)
                stock = statistics.median(wall["stock"])
                for n in names:
                    rows.append(dict(dtype=dtype_name, length=str(length), T=T, B=batches[0][0].size(0),
                                     method=method, path=n, wall_ms=1e3 * statistics.median(wall[n]),
                                     wall_spread=spread(wall[n]), kernel_ms=1e3 * statistics.median(kern[n]) if kern[n] else float("nan"),
                                     kernel_spread=spread(kern[n]) if len(kern[n]) > 1 else float("nan"),
                                     peak_mb=peak.get(n, 0) / 2 ** 20,
                                     to_stock=statistics.median(wall[n]) / stock, rounds=wall[n],
                                     warmup_s=warm_s, new_compiles=new, compiles=len(COUNTED.keys)))
                yield rows


def spread(xs):
    m = statistics.median(xs)
    return (max(xs) - min(xs)) / m if m > 0 else float("nan")


def verdicts(rows, today=("distance bias", "region split", "sdpa bias", "torch rotate")):
    """triton against each of today's paths, where the gap exceeds both spreads."""
    out = []
    key = lambda r: (r["dtype"], r["length"], r["method"])  # noqa: E731
    groups = {}
    for r in rows:
        groups.setdefault(key(r), {})[r["path"]] = r
    for (dtype, length, method), by_path in groups.items():
        t = by_path["triton"]
        for other in [p for p in today if p in by_path]:
            o = by_path[other]
            for what in ("wall", "kernel"):
                ratio = t[f"{what}_ms"] / o[f"{what}_ms"]
                gap = abs(1 - ratio)
                noise = max(t[f"{what}_spread"], o[f"{what}_spread"])
                if not noise >= 0:  # one profiler pass: no spread, no verdict
                    continue
                word = ("faster" if ratio < 1 else "slower") if gap > noise else "no verdict"
                out.append(f"{dtype} {length} {method}: triton / {other} ({what}) {ratio:.3f}, "
                           f"spread {noise:.1%}: {word}")
    return out


def machine(device) -> str:
    import triton
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, timeout=10).stdout.strip() or "no .git"
    except OSError:
        commit = "no git"
    return (f"card {card} | torch {torch.__version__} | triton {triton.__version__} | commit {commit}"
            f"{' | TRITON_INTERPRET=1' if os.environ.get('TRITON_INTERPRET') == '1' else ''}")


def table(rows, header) -> str:
    lines = [header, ""]
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        for length in dict.fromkeys(r["length"] for r in rows):
            sel = [r for r in rows if r["dtype"] == dtype and r["length"] == length]
            if not sel:
                continue
            warm = ", ".join(f"{m} {r['warmup_s']:.1f} s, {r['new_compiles']} new" for m, r in
                             {r["method"]: r for r in sel}.items())
            lines += [f"### {dtype}, length {length} (T {sel[0]['T']}, B {sel[0]['B']}, forward + backward, "
                      f"median per batch)", "",
                      f"Warm-up, and the Triton kernel specializations it compiled (total {sel[-1]['compiles']}): "
                      f"{warm}", "",
                      "| method | path | wall ms | spread | kernel ms | spread | peak MB | x stock (wall) |",
                      "|---|---|---|---|---|---|---|---|"]
            for r in sel:
                lines.append(f"| {r['method']} | {r['path']} | {r['wall_ms']:.3f} | {r['wall_spread']:.1%} | "
                             f"{r['kernel_ms']:.3f} | {r['kernel_spread']:.1%} | {r['peak_mb']:.0f} | "
                             f"{r['to_stock']:.2f} |")
            lines.append("")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--check", action="store_true", help="numerics against float64")
    p.add_argument("--time", action="store_true", help="timing against today's paths and stock")
    p.add_argument("--dtypes", default="fp16,bf16", help="comma-separated, of fp16, bf16, fp32")
    p.add_argument("--methods", default="relpos_kv,t5bias,relpos_k,alibi,rope",
                   help="comma-separated, timed in this order (default: by the size of today's gap to stock)")
    p.add_argument("--lengths", default="512,1024,wmt", help="comma-separated: wmt or a length")
    p.add_argument("--tokens", type=int, default=16384, help="tokens per batch (default 16384)")
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tol", type=float, default=2e-2)
    p.add_argument("--relpos-check", action="store_true",
                   help="Shaw's terms at more lengths, dtypes and table dtypes, QA included (RELPOS_CHECKS)")
    p.add_argument("--relpos-dtypes", default="fp16,bf16,fp32", help="the dtypes of --relpos-check")
    p.add_argument("--profile-passes", type=int, default=1,
                   help="profiler passes per path after the timed rounds (kernel time; default 1)")
    p.add_argument("--max-compiles", type=int, default=None,
                   help="fail (exit 1) when the Triton path needed more kernel specializations than this "
                        "(each is one compile on a GPU: the step's time limit is sized for them)")
    p.add_argument("--out", default=None, help="folder for triton_results_<dtypes>.md and .json")
    args = p.parse_args(argv)
    args.dtypes = args.dtypes.split(",")
    args.relpos_dtypes = args.relpos_dtypes.split(",")
    args.methods = args.methods.split(",")
    args.lengths = args.lengths.split(",")
    for flag, names in (("--dtypes", args.dtypes), ("--relpos-dtypes", args.relpos_dtypes)):
        for d in names:
            if d not in DTYPES:
                fail(f"{flag}: {d!r} is not one of {list(DTYPES)}")
    for m in args.methods:
        if m not in METHODS:
            fail(f"--methods: {m!r} is not one of {list(METHODS)}")
    for n in args.lengths:
        if n != "wmt" and not n.isdigit():
            fail(f"--lengths: {n!r} is neither 'wmt' nor a length")
    if not (args.check or args.time or args.relpos_check):
        fail("give --check, --relpos-check and/or --time")
    if args.rounds < 1 or args.batches < 1 or args.profile_passes < 0:
        fail("--rounds and --batches must be >= 1, --profile-passes >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: no CUDA device (the dry run: --device cpu with TRITON_INTERPRET=1)")
    if args.device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        fail("--device cpu needs TRITON_INTERPRET=1 in the environment (set before Python starts)")
    device = torch.device(args.device)
    configs = None if device.type == "cuda" else SMALL
    header = machine(device)
    print(header)
    ok = True
    if args.check:
        ok = check(args, device, configs)
    if args.relpos_check:
        ok &= check_relpos(args, device, configs)
    rows = []
    for group in time_paths(args, device, configs) if args.time else ():
        rows += group
        print(table(group, "") + "\n".join(f"- {v}" for v in verdicts(group)) + "\n", flush=True)
        text = table(rows, "## Triton distance kernels: " + header) + "\n" + "\n".join(
            f"- {v}" for v in verdicts(rows)) + "\n"
        if args.out:
            stem = Path(args.out) / f"triton_results_{'_'.join(args.dtypes)}"
            stem.parent.mkdir(parents=True, exist_ok=True)
            for suffix, content in ((".md", text), (".json", json.dumps({"machine": header, "rows": rows}, indent=1))):
                tmp = stem.with_suffix(suffix + ".partial")  # nothing half-written under the final name
                tmp.write_text(content)
                tmp.replace(stem.with_suffix(suffix))
    if args.time:
        print(f"Triton kernel specializations (compiles on a GPU): {len(COUNTED.keys)}"
              + (f", at most {args.max_compiles} allowed" if args.max_compiles is not None else ""))
        if args.max_compiles is not None and len(COUNTED.keys) > args.max_compiles:
            print(f"triton_distance_bench: {len(COUNTED.keys)} kernel specializations, more than --max-compiles "
                  f"{args.max_compiles}: the step's time limit is sized for that many compiles", file=sys.stderr)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
