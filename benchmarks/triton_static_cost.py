"""The static cost of every Triton kernel the distance paths and rope launch, compiled for
sm_90 (H100/H200) and sm_80 (A100) on a machine without a GPU. Nothing runs on a GPU: the
figures are a reading of the code the GPU would run.

    python benchmarks/triton_static_cost.py [--json FILE] [--arch 90,80] [--lengths 512,1024]
                                            [--tutorial PATH] [--no-causal]

1. The launches: the project's launcher (``triton_attention`` and its backward,
   ``fused_rotate``) runs on CPU tensors (fp16, B 2, H 8, head size 64, a padded sentence;
   every call again without padding, ``..., no padding``: the tutorial takes no mask)
   (q, k, v and dO as the layer passes them: permuted views of (T, B, H, D)) with a
   stand-in kernel module that records each launch instead of running it. Variants:
   ``terms off`` (alibi's launch with ``BIAS`` 0 and ``SPLIT`` as the launcher sets it for a
   call without terms: one stage, split only under the causal mask), ``terms off, three
   stages`` (the same with ``SPLIT`` kept on: the reading of "terms off" before 2026-11-29,
   non-causal only), alibi, t5bias (32 buckets, max distance 128, learned table), relpos k
   and relpos kv (k = 16); causal and not. The torch ops the
   path runs outside its kernels are recorded at the same time (a dispatch mode): their
   FLOPs (matmuls 2 M N K, other ops one per output element) and bytes (inputs read and
   outputs written; views cost nothing; an ``out=`` tensor is written, not read). dO, the
   gradient the layer hands the path, is made before the recording.
2. The compile: each launch is specialised as Triton's launcher would (its binder: 16-byte
   aligned pointers, ints divisible by 16, ints equal to 1) and compiled by
   ``triton.compile(ASTSource(...), target=GPUTarget("cuda", cap, 32))``. Registers and
   spills from the wheel's ``ptxas -v``; shared memory and warps from Triton's metadata;
   CTAs per SM from registers, shared memory and warps; the SASS from ``nvdisasm``.
3. The loops: a SASS branch back to an earlier label closes a loop (its body: the addresses
   between). A main loop is an outermost loop holding tensor-core instructions (HGMMA on
   sm_90, HMMA on sm_80); a loop inside a main loop is a nested loop (spin-waits aside).
   A main loop's spills: its local-memory instructions (LDL, STL).
   Pipelined: the TTGIR's ``scf.for`` holding the loop's dot has asynchronous copies
   (``ttg.async_copy_global_to_local``) or a TMA load.
4. The model, per SM, in cycles, for one CTA's warps each running a loop body once:
   ``tensor`` = the body's MMA FLOP / the dense fp16 rate (sm_90 4096 FLOP/clk/SM, sm_80
   2048); ``issue`` = warp-instructions / 4 (four schedulers); ``fp32`` = FFMA/FADD/FMUL
   warp-instructions x 32 / FP32 lanes (128 on sm_90, 64 on sm_80) plus IMAD x 32 / 64;
   ``alu`` = integer, compare, select, min/max, move and pack instructions x 32 / 64;
   ``mufu`` = MUFU and conversions x 32 / 16; ``lsu`` = one 128-byte wavefront per 128
   bytes a shared-memory instruction moves (at least one) and per 128 bytes a global
   instruction moves (at least one); ``shfl`` = shuffles x 1. Bounds: ``max`` = every
   unit overlaps (the largest wins); ``sum`` = the tensor cores do not overlap the rest
   (tensor + the largest other). A kernel's cost per (batch, head) = programs x (its code
   outside the main loops) + the sum over main loops of (iterations x body) + nested
   iterations x nested body, iterations from :func:`plan`, a mirror of the kernels' loop
   bounds. No latencies, occupancy, caches or branch probabilities: every instruction of
   a body counts once per iteration. Not a timing.
5. The ratio: forward + backward (every kernel of the path) per (batch, head), ``sum``
   bound, against the same kernels with every term off and, given ``--tutorial`` (a copy
   of triton-lang/triton ``python/tutorials/06-fused-attention.py``, never shipped here),
   against its FlashAttention-2: its ``_attn_fwd`` as written, its backward's first kernel
   ``_attn_bwd_preprocess`` (delta = rowsum(dO O), 128 rows a program) and its backward's
   ``_attn_bwd_dkdv`` / ``_attn_bwd_dq`` loops (unmasked, over every tile, at its own blocks
   32 x 128 and 128 x 32, 4 warps, 5 stages) in wrappers made here, non-causal only.
6. With the torch work outside the kernels (``sum_with_outside``): the ``sum`` total plus
   each recorded torch op at its roofline, in the same SM cycles per (batch, head): its
   bytes at the HBM rate or its FLOPs at the FP32 rate (2 x FP32 lanes per clock; torch's
   float32 matmuls run without TF32 by default), whichever is larger, summed over the ops
   and divided by B x H. HBM per SM clock: H100 SXM 3.35 TB/s over 132 SMs at 1.98 GHz,
   12.8 bytes (an H200's 4.8 TB/s: 18.4); A100 SXM 2.04 TB/s over 108 SMs at 1.41 GHz,
   13.4 bytes. No launch overheads and no cache hits: each op reads and writes HBM once.
   The tutorial does no torch work outside its kernels. This reading is what keeps work
   moved out of a kernel from looking like a gain. The call counted is the second of its
   shape: what the launcher makes once per shape and caches (t5bias's bucket of every
   distance, its one-hot rows and its bias copies' index) is made by the first, whose torch
   work the JSON keeps as ``outside_first_call`` (not in ``sum_with_outside``).

Changes to the reading, and why (2026-11-29; the JSON keeps both readings side by side):

* the tutorial's total counts its ``_attn_bwd_preprocess``: its backward launches it, and the
  distance path now computes delta in a kernel of its own too (``backward_delta``, counted in
  the path's total like every kernel it launches). The earlier reading left the tutorial's
  out while the path's delta sat in ``backward_q``'s prologue; the JSON's tutorial totals
  keep it as ``sum_without_delta`` / ``max_without_delta`` (about 1 % of the total).
* ``terms off`` is now the launch the launcher would make without terms (one stage); the
  earlier reading, three stages with nothing to split, stays as ``terms off, three stages``.
  The other variants' "vs terms off" ratios are against the one-stage reading.
* (2026-11-30) the torch work outside the kernels is a call whose shape was seen before (its
  tables cached), as in training, where a shape recurs; the first call's, tables made, is
  ``outside_first_call``. The earlier reading counted that first call: 4 kcycles more for
  t5bias at L 1024 (its bucket function on every distance), under 0.1 for the others.
* the torch work outside the kernels no longer counts the benchmark's own making of dO (a
  (T, B, H, D) copy, 2.1 MB at L 512, that every variant carried, "terms off" included) nor
  an ``out=`` tensor as read.
"""

import argparse
import ast
import importlib
import json
import math
import re
import subprocess
import sys
import tempfile
import time
import types
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

B, H, D = 2, 8, 64
T5_BUCKETS, T5_MAX_DISTANCE, CLIP = 32, 128, 16
#: "terms off": alibi's launch with BIAS 0 and, as the launcher decides for a call without terms,
#: one stage (SPLIT off; on under the causal mask); "terms off, three stages": the same kernels with
#: SPLIT kept on (the earlier reading of "terms off"; non-causal only, causal is split anyway)
VARIANTS = ("terms off", "terms off, three stages", "alibi", "t5bias", "relpos k", "relpos kv")
#: the suffix of a variant read on a batch without padding (no key padding mask)
NO_PADDING = ", no padding"


def reading_key(variant: str, causal: bool, padded: bool = True) -> str:
    """The key of one reading in the JSON's totals: ``alibi``, ``alibi causal``, ``alibi causal, no padding``
    (read back by :func:`_reading`)."""
    return f"{variant}{' causal' if causal else ''}{'' if padded else NO_PADDING}"
UNITS = ("tensor", "issue", "fp32", "alu", "mufu", "lsu", "shfl")
ARCH = {
    90: dict(gpu="H100/H200", tensor=4096, fp32=128, regs=65536, smem=228 * 1024, max_warps=64, max_ctas=32,
             hbm=3.35e12 / (132 * 1.98e9)),
    80: dict(gpu="A100", tensor=2048, fp32=64, regs=65536, smem=164 * 1024, max_warps=64, max_ctas=32,
             hbm=2.04e12 / (108 * 1.41e9)),
}


# ---------------------------------------------------------------------------------------
# 1. The launches and the torch work around them
# ---------------------------------------------------------------------------------------
class _Recorder:
    """Stands in for a @triton.jit kernel: ``kernel[grid](*args, **kw)`` records the launch."""

    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append(dict(kernel=self.name, grid=tuple(grid), args=args, kwargs=kwargs))
        return launch


def stand_in(module, calls):
    """A module like ``module`` whose kernels record their launches."""
    import triton
    jitted = {n: _Recorder(n, calls) for n, f in vars(module).items() if isinstance(f, triton.runtime.JITFunction)}
    return types.SimpleNamespace(tl=module.tl, **jitted)


class TorchWork(TorchDispatchMode):
    """The aten ops run while active: name, FLOPs, bytes (views cost nothing)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view:
            return out
        reads = (args, {n: a for n, a in (kwargs or {}).items() if n != "out"})  # an out= tensor is written only
        ins = [a for a in torch.utils._pytree.tree_leaves(reads) if isinstance(a, torch.Tensor)]
        outs = [a for a in torch.utils._pytree.tree_leaves(out) if isinstance(a, torch.Tensor)]
        name = func.__name__
        if name.startswith(("empty", "new_empty")):
            return out  # an allocation: no work
        flops = _flops(func, ins, outs)
        nbytes = sum(t.numel() * t.element_size() for t in ins + outs)
        self.ops.append(dict(op=name, flops=flops, bytes=nbytes,
                             shapes=[list(t.shape) for t in ins[:2]] + [list(t.shape) for t in outs[:1]]))
        return out


def _flops(func, ins, outs) -> int:
    name = func.__name__.split(".")[0]
    if name in ("mm", "bmm", "addmm", "baddbmm", "matmul"):
        a, b = ins[-2], ins[-1]
        return 2 * a.numel() * b.size(-1)
    if name in ("zeros", "zero_", "fill_", "copy_", "clone", "_to_copy", "contiguous", "expand_copy", "new_zeros",
                "zeros_like", "arange", "lift_fresh"):
        return 0
    return sum(t.numel() for t in outs)


def _terms(variant, causal, leaf):
    from fairseq_attn_core.backends.distance import DistanceTerms
    from fairseq_attn_core.pieces.alibi import alibi_slopes
    from fairseq_attn_core.pieces.t5bias import relative_position_bucket
    if variant == "t5bias":
        table = leaf(T5_BUCKETS, H)
        return DistanceTerms(bias_table=table, bucket=lambda r: relative_position_bucket(
            r, not causal, T5_BUCKETS, T5_MAX_DISTANCE)), [table]
    if variant.startswith("relpos"):
        tables = [leaf(2 * CLIP + 1, D) for _ in range(2 if variant == "relpos kv" else 1)]
        return DistanceTerms(key_table=tables[0], value_table=tables[1] if len(tables) > 1 else None,
                             clip=CLIP), tables
    return DistanceTerms(slopes=tuple(alibi_slopes(H))), []


def record(L: int, causal: bool, variants=VARIANTS, cap: int = 90, padded: bool = True):
    """{variant: ([launch], [torch op], [torch op of the shape's first call])}: the launches one
    forward + backward makes at length L on a GPU of compute capability ``cap`` (its blocks),
    the torch work around them in a call whose shape has been seen (its tables cached), and the
    torch work of the shape's first call (the tables made). ``padded``: a batch with a padded
    sentence (a key padding mask), else none (fairseq passes none when a batch has no padding)."""
    from fairseq_attn_core.backends.distance import triton_launch
    from fairseq_attn_core.backends.distance.triton_configs import configs_for
    configs = configs_for(D, divmod(cap, 10))
    kernels = triton_launch.kernels()
    g = torch.Generator().manual_seed(0)

    def leaf(*shape):
        return (torch.randn(*shape, generator=g) * 0.1).to(torch.float16).requires_grad_(True)

    out = {}
    for variant in variants:
        if causal and variant == "terms off, three stages":
            continue
        calls = []
        # as the layer passes them: (T, B, H, D) projections seen as (B, H, T, D)
        q, k, v = (x.permute(1, 2, 0, 3) for x in (leaf(L, B, H, D), leaf(L, B, H, D), leaf(L, B, H, D)))
        kpm = None
        if padded:
            kpm = torch.zeros(B, L, dtype=torch.bool)
            kpm[1, L - 37:] = True
        terms, tables = _terms("alibi" if variant.startswith("terms off") else variant, causal, leaf)
        # dO as the layer's gradient arrives: a (T, B, H, D) tensor seen as (B, H, T, D), made before
        # the recording (the caller's work, not the path's)
        dout = torch.randn(B, H, L, D, generator=g).to(torch.float16).permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)
        # a shape's first call makes its tables (cached per shape); the count is of the next call
        with TorchWork() as first:
            o = triton_launch.triton_attention(terms, q, k, v, D ** -0.5, kpm, causal, configs,
                                               module=stand_in(kernels, []))
            torch.autograd.grad(o, [q, k, v] + tables, dout)
        with TorchWork() as work:
            o = triton_launch.triton_attention(terms, q, k, v, D ** -0.5, kpm, causal, configs,
                                               module=stand_in(kernels, calls))
            torch.autograd.grad(o, [q, k, v] + tables, dout)
        if variant in ("terms off", "terms off, three stages"):  # the launcher's SPLIT rule: a term or causal
            split = causal or variant == "terms off, three stages"
            for c in calls:
                if "BIAS" in c["kwargs"]:
                    c["kwargs"] = dict(c["kwargs"], BIAS=0, SPLIT=split)
                if "PEEL" in c["kwargs"]:  # the launcher's rule without alibi or a table (triton_configs.peel_last_tile)
                    c["kwargs"] = dict(c["kwargs"], PEEL=c["kwargs"]["SHIFT"])
        out[variant] = (calls, work.ops, first.ops)
    return out, kernels


def record_rope(L: int):
    from fairseq_attn_core import rope_fused
    calls = []
    x = torch.randn(B, H, L, D).to(torch.float16).requires_grad_(True)
    y = rope_fused.fused_rotate(x, torch.arange(L), D, 10000.0, module=stand_in(rope_fused.kernels(), calls))
    torch.autograd.grad(y, [x], torch.ones_like(y))
    return calls, rope_fused.kernels()


# ---------------------------------------------------------------------------------------
# 2. The compile and its reading
# ---------------------------------------------------------------------------------------
def _tools():
    import triton
    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    return {n: str(bin_dir / n) for n in ("ptxas", "nvdisasm")}


def compile_launch(fn, args, kwargs, cap: int):
    """``fn`` compiled for sm_<cap> as the launcher specialises this call."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature
    target = GPUTarget("cuda", cap, 32)
    backend = make_backend(target)
    bind = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = bind(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    return triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)


def ptxas_usage(ptx: str, cap: int) -> dict:
    """Registers, spill bytes (stores, loads) from ptxas -v."""
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        arch = f"sm_{cap}a" if cap >= 90 else f"sm_{cap}"
        done = subprocess.run([_tools()["ptxas"], "-v", f"--gpu-name={arch}", str(src), "-o", str(Path(d) / "k.o")],
                              capture_output=True, text=True)
    log = done.stdout + done.stderr
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if not regs or not spill:
        raise RuntimeError(f"ptxas -v gave no register count: {log[-500:]}")
    return dict(regs=int(regs.group(1)), spill_stores=int(spill.group(1)), spill_loads=int(spill.group(2)))


_SASS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*);")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")


def sass(cubin: bytes):
    """[(address, opcode, operands)], {label: address} of the cubin's code."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([_tools()["nvdisasm"], "-c", f.name], capture_output=True, text=True).stdout
    ins, labels, pending = [], {}, []
    for line in text.splitlines():
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _SASS.search(line)
        if m:
            addr = int(m.group(1), 16)
            for lab in pending:
                labels[lab] = addr
            pending = []
            ins.append((addr, m.group(3), m.group(4)))
    return ins, labels


def loops(ins, labels):
    """Loops as (first, last) instruction indices: a branch back to an earlier label closes
    one; loops sharing a header merge. Spin-waits (only barrier waits and branches) and the
    out-of-line retries placed after the last EXIT (they jump back into a loop) left out."""
    index = {a: i for i, (a, _, _) in enumerate(ins)}
    last_exit = max((i for i, (_, op, _) in enumerate(ins) if op.startswith("EXIT")), default=len(ins))
    spans = {}
    for i, (addr, op, operands) in enumerate(ins):
        if i > last_exit or op.split(".")[0] not in ("BRA", "JMP"):  # past the last EXIT: out-of-line retries
            continue
        m = re.search(r"(\.L_x_\d+)", operands)
        if m and m.group(1) in labels and labels[m.group(1)] <= addr:
            head = index[labels[m.group(1)]]
            spans[head] = max(spans.get(head, i), i)
    out = []
    for first, last in sorted(spans.items()):
        body = {op.split(".")[0] for _, op, _ in ins[first:last + 1]}
        if body <= {"SYNCS", "BRA", "NOP", "YIELD", "NANOSLEEP"}:
            continue
        out.append((first, last))
    return out


def is_mma(op: str) -> bool:
    return op.startswith(("HGMMA", "HMMA"))


def mma_flop(op: str, num_warps: int) -> float:
    """FLOP one SASS MMA instruction does for the whole CTA."""
    m = re.match(r"HGMMA\.(\d+)x(\d+)x(\d+)", op)
    if m:  # one per warpgroup of 4 warps
        a, b, c = map(int, m.groups())
        return 2.0 * a * b * c * max(1, num_warps // 4)
    m = re.match(r"HMMA\.(\d\d)(\d)(\d+)", op)
    if m:  # one per warp
        a, b, c = map(int, m.groups())
        return 2.0 * a * b * c * num_warps
    return 0.0


def unit_of(op: str) -> str:
    base = op.split(".")[0]
    if is_mma(op):
        return "tensor"
    if base in ("FFMA", "FADD", "FMUL", "HFMA2", "HADD2", "HMUL2", "DFMA", "DADD", "DMUL"):
        return "fp32"
    if base in ("IMAD", "IMUL"):
        return "imad"
    if base in ("MUFU", "F2F", "I2F", "F2I", "I2FP", "F2IP", "I2I", "FRND", "POPC", "FLO", "BREV"):
        return "mufu"
    if base in ("LDS", "LDSM", "STS", "STSM", "ATOMS"):
        return "shared"
    if base in ("LDG", "STG", "LDGSTS", "RED", "ATOMG", "LDL", "STL", "LD", "ST", "UTMALDG", "UBLKCP"):
        return "global"
    if base == "SHFL":
        return "shfl"
    if base in ("FMNMX", "FSETP", "FSET", "FSEL", "SEL", "IADD3", "LOP3", "ISETP", "SHF", "LEA", "IABS", "IMNMX",
                "VIMNMX", "VIADD", "PRMT", "PLOP3", "MOV", "F2FP", "IADD", "SHL", "SHR", "BMSK", "SGXT", "P2R", "R2P"):
        return "alu"
    return "other"  # branches, barriers, uniform-datapath instructions: issue slots only


def access_bytes(op: str, operands: str) -> int:
    """Bytes one lane moves."""
    parts = op.split(".")
    if parts[0] in ("LDSM", "STSM"):
        return 4 * next((int(p) for p in parts[1:] if p in ("2", "4")), 1)
    for p in parts[1:]:
        if p in ("128", "64", "U16", "S16", "U8", "S8"):
            return {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}[p]
    return 4


def cycles(block, num_warps: int, cap: int) -> dict:
    """The model's cycles per SM of one pass of ``block`` ([(address, opcode, operands)]) by
    one CTA (see the module docstring)."""
    arch = ARCH[cap]
    c = dict.fromkeys(UNITS, 0.0)
    for _, op, operands in block:
        w = num_warps  # warp-instructions
        c["issue"] += w / 4
        unit = unit_of(op)
        if unit == "tensor":
            c["tensor"] += mma_flop(op, num_warps) / arch["tensor"]
        elif unit == "fp32":
            c["fp32"] += w * 32 / arch["fp32"]
        elif unit == "imad":
            c["fp32"] += w * 32 / 64
        elif unit == "alu":
            c["alu"] += w * 32 / 64
        elif unit == "mufu":
            c["mufu"] += w * 32 / 16
        elif unit in ("shared", "global"):
            c["lsu"] += w * max(1.0, 32 * access_bytes(op, operands) / 128)
        elif unit == "shfl":
            c["shfl"] += w
    rest = max(c[u] for u in UNITS if u != "tensor")
    c["max"] = max(c["tensor"], rest)
    c["sum"] = c["tensor"] + rest
    return c


def mix(block) -> dict:
    """The instruction mix: count per class."""
    out = Counter()
    for _, op, _ in block:
        base = op.split(".")[0]
        unit = unit_of(op)
        if unit == "alu":
            unit = {"FMNMX": "fmnmx", "FSETP": "fsetp", "FSEL": "sel", "SEL": "sel", "MOV": "mov",
                    "F2FP": "pack"}.get(base, "int")
        elif unit == "fp32":
            unit = "ffma/fadd/fmul"
        elif unit == "global":
            unit = {"LDGSTS": "async copy", "LDL": "local", "STL": "local"}.get(base, "global")
        elif unit == "shared":
            unit = "lds" if base.startswith("LD") else "sts"
        elif unit == "other" and base in ("BAR", "DEPBAR", "WARPGROUP", "SYNCS", "MEMBAR"):
            unit = "barrier"
        out[unit] += 1
    return dict(sorted(out.items()))


def ttgir_loops(ttgir: str):
    """The kernel's scf.for loops in order: (depth, async copies, dots) of each, the ops of
    its nested loops included."""
    out, stack = [], []
    for line in ttgir.splitlines():
        s = line.strip()
        if " scf.for " in f" {s}" and "=" in s.split("scf.for")[0] or s.startswith("scf.for"):
            entry = dict(depth=len(stack), async_copies=0, dots=0, indent=len(line) - len(line.lstrip()))
            out.append(entry)
            stack.append(entry)
            continue
        if stack and s.startswith("}") and len(line) - len(line.lstrip()) <= stack[-1]["indent"]:
            stack.pop()
            continue
        for entry in stack:
            if "async_copy_global_to_local" in s or "async_tma_copy_global_to_local" in s or "descriptor_load" in s:
                entry["async_copies"] += 1
            if "tt.dot" in s or "warp_group_dot " in s:
                entry["dots"] += 1
    return out


def read_kernel(compiled, cap: int) -> dict:
    """Registers, spills, shared memory, CTAs per SM, pipelining, the main loops' mix and
    cycles, the code outside them."""
    meta = compiled.metadata
    warps = meta.num_warps
    usage = ptxas_usage(compiled.asm["ptx"], cap)
    ins, labels = sass(compiled.asm["cubin"])
    spans = loops(ins, labels)
    top = [s for s in spans if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in spans)]
    main = [s for s in top if any(is_mma(op) for _, op, _ in ins[s[0]:s[1] + 1])]
    inside = set()
    for first, last in main:
        inside.update(range(first, last + 1))
    tt = [x for x in ttgir_loops(compiled.asm["ttgir"]) if x["dots"]]
    tt_top = [x for x in tt if x["depth"] == min((y["depth"] for y in tt), default=0)]
    arch = ARCH[cap]
    per_warp = math.ceil(usage["regs"] * 32 / 256) * 256
    ctas = min(arch["regs"] // (per_warp * warps), arch["smem"] // max(meta.shared + 1024, 1),
               arch["max_warps"] // warps, arch["max_ctas"])
    out = dict(warps=warps, stages=meta.num_stages, shared_bytes=meta.shared, ctas_per_sm=int(ctas), **usage,
               outside=cycles([ins[i] for i in range(len(ins)) if i not in inside], warps, cap),
               main_loops=[], sass_instructions=len(ins))
    for n, (first, last) in enumerate(main):
        body = ins[first:last + 1]
        nested = [s for s in spans if s != (first, last) and first <= s[0] and s[1] <= last]
        out["main_loops"].append(dict(
            instructions=len(body), mix=mix(body), cycles=cycles(body, warps, cap),
            spill_instructions=sum(1 for _, op, _ in body if op.split(".")[0] in ("LDL", "STL")),
            nested_loops=[dict(instructions=b - a + 1, cycles=cycles(ins[a:b + 1], warps, cap)) for a, b in nested],
            pipelined=bool(tt_top[n]["async_copies"]) if n < len(tt_top) else None))
    out["nested_loops_in_ttgir"] = sum(1 for x in ttgir_loops(compiled.asm["ttgir"]) if x["depth"] > 0)
    return out


# ---------------------------------------------------------------------------------------
# 3. How often each loop runs: a mirror of the kernels' loop bounds
# ---------------------------------------------------------------------------------------
def _cdiv(a, b):
    return -(-a // b)


def _arg(launch, fn, name):
    names = [p.name for p in fn.params]
    return dict(zip(names, launch["args"]), **launch["kwargs"])[name]


def plan(launch, fn, variant: str):
    """[(iterations of main loop n per (batch, head), nested iterations)] for one launch: the
    tiles each program visits in each stage as the kernel's own bounds give them (a mirror of
    ``_stages`` / ``_q_stages`` of the kernels: far-left, band, far-right for a query tile;
    far-right, band, far-left for a key tile; one loop when nothing splits; with ``MERGE_FAR``
    (the forward, backward_kv) the far tiles of both sides in one loop, then the band; with ``BLOCK_NF``
    (the forward, backward_q) far-left, far-right, then the band). With ``PEEL`` (the forward, backward_q) or
    ``SHIFT`` (backward_kv; a length no tile divides) the far loop that ends at the length runs its whole tiles
    and the partial one after it, outside the loop (its code is
    charged to every program: an over-count for those whose band reaches the length); backward_kv's far-right
    tiles stop at the last whole query tile (the band takes a partial one)."""
    get = lambda n: _arg(launch, fn, n)  # noqa: E731
    kw = launch["kwargs"]
    if launch["kernel"] == "backward_delta":
        return []  # no main loop
    if "SPLIT" not in kw:
        return _plan_one_loop(launch, fn)
    T, S, start = get("T"), get("S"), get("start")
    bm, bn, causal, split = kw["BLOCK_M"], kw["BLOCK_N"], kw["CAUSAL"], kw["SPLIT"]
    name = launch["kernel"]
    shift = bool(kw.get("PEEL") if name in ("forward", "backward_q") else kw.get("SHIFT"))  # a tile after the loop
    last = (lambda n, b: n // b) if shift else _cdiv  # the tiles of the loop that ends at the length
    WL, WR = get("WL"), get("WR")
    counts = [0, 0, 0]
    if name in ("forward", "backward_q"):
        for m0 in range(0, T, bm):
            i0 = start + m0
            hi = min(S, i0 + bm) if causal else S
            fl = fr = hi
            if split:
                fl = min(max(0, (max(i0 - WL + 1, 0) // bn) * bn), hi)
                fr = hi if causal else max(min(hi, ((i0 + bm - 1 + WR + bn - 1) // bn) * bn), fl)
            counts[0] += _cdiv(fl, bn) if split else last(fl, bn)
            counts[1] += _cdiv(max(fr - fl, 0), bn)
            counts[2] += _cdiv(max(hi - fr, 0), bn) if causal else last(max(hi - fr, 0), bn)
    elif name == "backward_kv":
        for n0 in range(0, S, bn):
            m_lo = (max(0, n0 - start) // bm) * bm if causal else 0
            a = c = m_lo
            if split:
                a = m_lo if causal else min(max(m_lo, (max(n0 + 1 - WR - start, 0) // bm) * bm), T)
                c = max(min(T, ((max(n0 + bn - 1 + WL - start, 0) + bm - 1) // bm) * bm), a)
                if shift:
                    a = min(a, max(m_lo, (T // bm) * bm))
            counts[0] += _cdiv(max(a - m_lo, 0), bm)
            counts[1] += _cdiv(max(c - a, 0), bm)
            counts[2] += last(max(T - c, 0), bm)
    else:
        return [(0, 0)]
    nf = kw.get("BLOCK_NF") or 0
    if name in ("forward", "backward_q") and split and nf:  # far-left, far-right (nf keys wide), then the band (_q_band's
        # mirror); each far stage's tile that reaches into the band runs outside the loops (the code outside is
        # charged to every program: an over-count for the first and the last, which have one side only)
        counts = [0, 0, 0]
        for m0 in range(0, T, bm):
            i0 = start + m0
            hi = min(S, i0 + bm) if causal else S
            lo = (max(i0 - WL + 1, 0) // 16) * 16
            width = _cdiv(min(i0 + bm - 1 + WR, hi) - lo, bn) * bn
            fl = max(min(lo, hi - width), 0)
            fr = min(fl + width, hi)
            counts[0] += fl // nf
            counts[1] += 0 if causal else last(max(hi - _cdiv(fr, nf) * nf, 0), nf)
            counts[2] += _cdiv(fr - fl, bn)
        return [(n, 0) for n in (counts[::2] if causal else counts)]
    if not split:  # one loop: every tile in the stage that holds them
        counts = [sum(counts)]
    elif kw.get("MERGE_FAR"):  # the far tiles of both sides in one loop, before the band
        counts = [counts[0] + counts[2], counts[1]]
    elif causal:  # the far-right stage is empty by construction: compiled away
        counts = counts[:2] if name in ("forward", "backward_q") else counts[1:]
    return [(n, 0) for n in counts]


def _plan_one_loop(launch, fn):
    """The single-loop kernels (one main loop over every tile, per-bin loops nested in it)."""
    get = lambda n: _arg(launch, fn, n)  # noqa: E731
    T, S, start = get("T"), get("S"), get("start")
    bm, bn, causal = get("BLOCK_M"), get("BLOCK_N"), get("CAUSAL")
    name = launch["kernel"]
    tiles = []
    if name in ("forward", "backward_q"):
        for m0 in range(0, T, bm):
            hi = min(S, start + m0 + bm) if causal else S
            tiles += [(m0, n0) for n0 in range(0, hi, bn)]
    elif name == "backward_kv":
        for n0 in range(0, S, bn):
            lo = (max(0, n0 - start) // bm) * bm if causal else 0
            tiles += [(m0, n0) for m0 in range(lo, T, bm)]
    else:
        return [(0, 0)]
    nested = 0
    helper = _nested_helper(name, launch, fn)
    if helper:
        for m0, n0 in tiles:
            nested += _bins_spanned(helper, m0, n0, bm, bn, T, S, start, causal, launch, fn)
    return [(len(tiles), nested)]


def _nested_helper(name, launch, fn):
    kw = launch["kwargs"]
    if name == "backward_kv" and kw.get("TABLE_GRAD"):
        return "buckets"
    if (name == "backward_q" and kw.get("KEYS")) or (name == "forward" and kw.get("VALUES")):
        return "rows"
    return None


def _bins_spanned(helper, m0, n0, bm, bn, T, S, start, causal, launch, fn):
    lo_i, hi_i = start + m0, start + min(T, m0 + bm) - 1
    lo_j, hi_j = n0, min(S, n0 + bn) - 1
    dmin, dmax = lo_j - hi_i, hi_j - lo_i
    if causal:
        dmax = min(dmax, 0)
    if helper == "rows":
        k = _arg(launch, fn, "clip")
        return min(max(dmax, -k), k) - min(max(dmin, -k), k) + 1
    bucket = _arg(launch, fn, "BUCKET").tolist()
    seg = bucket[dmin + S - 1: dmax + S]
    return max(seg) - min(seg) + 1


# ---------------------------------------------------------------------------------------
# 4. The tutorial's FlashAttention-2 (a copy given on the command line; never shipped)
# ---------------------------------------------------------------------------------------
_TUTORIAL_WRAPPERS = '''
@triton.jit
def tutorial_bwd_kv(Q, K, V, DO, M, Dl, DK, DV, sm_scale, stride_tok, N_CTX,
                    BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, HEAD_DIM: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N1
    bh = tl.program_id(1)
    off = bh * N_CTX * HEAD_DIM
    offs_n = start_n + tl.arange(0, BLOCK_N1)
    offs_k = tl.arange(0, HEAD_DIM)
    k = tl.load(K + off + offs_n[:, None] * stride_tok + offs_k[None, :])
    v = tl.load(V + off + offs_n[:, None] * stride_tok + offs_k[None, :])
    dk = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    dk, dv = _attn_bwd_dkdv(dk, dv, Q + off, k, v, sm_scale, DO + off, M + bh * N_CTX, Dl + bh * N_CTX,
                            stride_tok, 1, 1, N_CTX, BLOCK_M1, BLOCK_N1, HEAD_DIM,
                            start_n, 0, N_CTX // BLOCK_M1, MASK=False)
    tl.store(DV + off + offs_n[:, None] * stride_tok + offs_k[None, :], dv.to(tl.float16))
    tl.store(DK + off + offs_n[:, None] * stride_tok + offs_k[None, :], (dk * sm_scale).to(tl.float16))


@triton.jit
def tutorial_bwd_q(Q, K, V, DO, M, Dl, DQ, stride_tok, N_CTX,
                   BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr, HEAD_DIM: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M2
    bh = tl.program_id(1)
    off = bh * N_CTX * HEAD_DIM
    offs_m = start_m + tl.arange(0, BLOCK_M2)
    offs_k = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + off + offs_m[:, None] * stride_tok + offs_k[None, :])
    do = tl.load(DO + off + offs_m[:, None] * stride_tok + offs_k[None, :])
    m = tl.load(M + bh * N_CTX + offs_m)[:, None]
    dq = tl.zeros([BLOCK_M2, HEAD_DIM], dtype=tl.float32)
    dq = _attn_bwd_dq(dq, q, K + off, V + off, do, m, Dl + bh * N_CTX, stride_tok, 1, 1, N_CTX,
                      BLOCK_M2, BLOCK_N2, HEAD_DIM, start_m, 0, N_CTX // BLOCK_N2, MASK=False)
    tl.store(DQ + off + offs_m[:, None] * stride_tok + offs_k[None, :], (dq * 0.6931471824645996).to(tl.float16))
'''


def load_tutorial(path: Path, workdir: Path):
    """The tutorial's @triton.jit functions (its host code is not run) and the wrappers above,
    as one importable module under ``workdir``."""
    tree = ast.parse(path.read_text())
    text = path.read_text().splitlines(keepends=True)
    parts = ["import triton\nimport triton.language as tl\n\n"]
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            first = min(d.lineno for d in node.decorator_list) - 1
            src = "".join(text[first:node.end_lineno])
            src = re.sub(r"^@triton\.autotune\(.*?\)\n", "", src, flags=re.S | re.M)
            parts.append(src + "\n\n")
    (workdir / "tutorial_fa2_local.py").write_text("".join(parts) + _TUTORIAL_WRAPPERS)
    sys.path.insert(0, str(workdir))
    return importlib.import_module("tutorial_fa2_local")


def tutorial_launches(mod, L: int, cap: int):
    """[(kernel name, fn, args, kwargs, programs, main-loop iterations per program)] at length L:
    on sm_90 its forward with tensor descriptors (TMA), as the tutorial runs on Hopper; on
    sm_80 its block-pointer forward."""
    f16 = lambda *s: torch.empty(*s, dtype=torch.float16)  # noqa: E731
    q = f16(B * H * L * D)
    m = torch.empty(B * H * L, dtype=torch.float32)
    bm, bn = 128, 64
    config = dict(HEAD_DIM=D, BLOCK_M=bm, BLOCK_N=bn, num_warps=4, num_stages=3)
    if cap >= 90:
        from triton.tools.tensor_descriptor import TensorDescriptor
        rows = q.view(B * H * L, D)
        dq, dk = (TensorDescriptor(rows, [B * H * L, D], [D, 1], [n, D]) for n in (bm, bn))
        fwd = ("forward", mod._attn_fwd_tma, [0.125, m, B, H, dq, dk, dk, dq, L],
               dict(config, FP8_OUTPUT=False, STAGE=1), _cdiv(L, bm), _cdiv(L, bn))
    else:
        fwd = ("forward", mod._attn_fwd, [q, q, q, 0.125, m, q] + [L * D * H, L * D, D, 1] * 4 + [B, H],
               dict(config, N_CTX=L, CAUSAL=False), _cdiv(L, bm), _cdiv(L, bn))
    kv = ("backward_kv", mod.tutorial_bwd_kv, [q, q, q, q, m, m, q, q, 0.125, D, L],
          dict(BLOCK_M1=32, BLOCK_N1=128, HEAD_DIM=D, num_warps=4, num_stages=5), _cdiv(L, 128), L // 32)
    dq = ("backward_q", mod.tutorial_bwd_q, [q, q, q, q, m, m, q, D, L],
          dict(BLOCK_M2=128, BLOCK_N2=32, HEAD_DIM=D, num_warps=4, num_stages=5), _cdiv(L, 128), L // 32)
    # its backward's first kernel, delta = rowsum(dO O), at the tutorial's PRE_BLOCK 128
    pre = ("backward_delta", mod._attn_bwd_preprocess, [q, q, m, B, H, L], dict(BLOCK_M=128, HEAD_DIM=D),
           _cdiv(L, 128), 0)
    return [fwd, pre, kv, dq]


# ---------------------------------------------------------------------------------------
# 5. The report
# ---------------------------------------------------------------------------------------
def kernel_total(read: dict, programs: int, loop_iterations, bound: str) -> float:
    """Model cycles per (batch, head) of one launch."""
    total = programs * read["outside"][bound]
    for lp, (iterations, nested) in zip(read["main_loops"], loop_iterations):
        total += iterations * lp["cycles"][bound]
        for nl in lp["nested_loops"]:
            total += nested * nl["cycles"][bound]
    return total


def outside_cycles(ops, cap: int) -> float:
    """Model cycles per (batch, head) of the torch ops a path runs outside its kernels: each op's
    bytes at the HBM rate or its FLOPs at the FP32 rate, the larger (docstring, 6.)."""
    arch = ARCH[cap]
    return sum(max(o["bytes"] / arch["hbm"], o["flops"] / (2 * arch["fp32"])) for o in ops) / (B * H)


def programs_per_bh(launch) -> int:
    return math.prod(int(n) for n in launch["grid"]) // (B * H)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--arch", default="90,80", help="compute capabilities (90: H100/H200, 80: A100)")
    ap.add_argument("--lengths", default="512,1024", help="lengths (queries = keys) of the totals")
    ap.add_argument("--tutorial", type=Path, help="a copy of triton's python/tutorials/06-fused-attention.py")
    ap.add_argument("--no-causal", action="store_true", help="leave out the causal launches")
    args = ap.parse_args(argv)
    try:
        archs = [int(a) for a in args.arch.split(",")]
        lengths = [int(n) for n in args.lengths.split(",")]
    except ValueError:
        ap.error("--arch and --lengths take comma-separated integers")
    if not set(archs) <= set(ARCH):
        ap.error(f"--arch: one of {sorted(ARCH)}")
    if args.tutorial and not args.tutorial.is_file():
        ap.error(f"--tutorial {args.tutorial}: no such file")
    import triton
    started = time.time()
    result = dict(meta=dict(triton=triton.__version__, torch=torch.__version__, B=B, H=H, D=D, dtype="fp16",
                            key_padding=True, no_padding_suffix=NO_PADDING, t5=dict(buckets=T5_BUCKETS, max_distance=T5_MAX_DISTANCE),
                            relpos_clip=CLIP, lengths=lengths, archs=archs),
                  kernels={}, totals={}, outside_torch={})
    # every call is also read without padding (fairseq passes no mask for a batch without it; the tutorial
    # takes none: like for like)
    readings = [(False, True), (False, False)] + ([] if args.no_causal else [(True, True), (True, False)])
    compiled_reads = {}
    for L in lengths:
        for causal, padded in readings:
            for cap in archs:  # each GPU's launches, with its blocks
                variants = VARIANTS if padded else tuple(v for v in VARIANTS if v != "terms off, three stages")
                recorded, kmod = record(L, causal, variants=variants, cap=cap, padded=padded)
                for variant, (calls, ops, first_ops) in recorded.items():
                    key = reading_key(variant, causal, padded)
                    result["outside_torch"].setdefault(f"sm_{cap}", {}).setdefault(key, {})[str(L)] = dict(
                        flops=sum(o["flops"] for o in ops), bytes=sum(o["bytes"] for o in ops),
                        ops=_summarise(ops), first_call_ops=_summarise(first_ops))
                    total = dict(max=0.0, sum=0.0)
                    for launch in calls:
                        fn = getattr(kmod, launch["kernel"])
                        ck = (key, launch["kernel"], cap)
                        if ck not in compiled_reads:  # the code does not depend on L (ints % 16 alike)
                            t0 = time.time()
                            compiled_reads[ck] = read_kernel(compile_launch(fn, launch["args"], launch["kwargs"], cap),
                                                             cap)
                            compiled_reads[ck]["compile_s"] = round(time.time() - t0, 2)
                            print(f"[static cost] sm_{cap} {key} {launch['kernel']}: "
                                  f"{compiled_reads[ck]['regs']} regs, {compiled_reads[ck]['spill_stores']} B spilled",
                                  file=sys.stderr)
                        read = compiled_reads[ck]
                        its = plan(launch, fn, variant)
                        if len(its) != len(read["main_loops"]):
                            result["meta"].setdefault("notes", []).append(
                                f"sm_{cap} {key} {launch['kernel']}: {len(read['main_loops'])} main loops in the SASS, "
                                f"{len(its)} in the plan: its total is not trusted")
                        for bound in total:
                            total[bound] += kernel_total(read, programs_per_bh(launch), its, bound)
                        result["kernels"].setdefault(f"sm_{cap}", {}).setdefault(key, {})[launch["kernel"]] = dict(
                            read, block_m=launch["kwargs"].get("BLOCK_M"), block_n=launch["kwargs"].get("BLOCK_N"))
                    total["outside"] = outside_cycles(ops, cap)
                    total["outside_first_call"] = outside_cycles(first_ops, cap)  # the shape's tables made
                    total["sum_with_outside"] = total["sum"] + total["outside"]
                    result["totals"].setdefault(f"sm_{cap}", {}).setdefault(key, {})[str(L)] = total
    if args.tutorial:
        with tempfile.TemporaryDirectory() as work:
            mod = load_tutorial(args.tutorial, Path(work))
            for cap in archs:
                try:
                    for L in lengths:
                        total = dict(max=0.0, sum=0.0)
                        delta_kernel = dict(max=0.0, sum=0.0)
                        for name, fn, a, kw, programs, its in tutorial_launches(mod, L, cap):
                            ck = ("tutorial", name, cap)
                            if ck not in compiled_reads:
                                with _quiet_stderr():
                                    compiled_reads[ck] = read_kernel(compile_launch(fn, a, kw, cap), cap)
                            read = compiled_reads[ck]
                            result["kernels"][f"sm_{cap}"].setdefault("tutorial", {})[name] = read
                            for bound in total:
                                cost = kernel_total(read, programs, [(programs * its, 0)], bound)
                                total[bound] += cost
                                if name == "backward_delta":
                                    delta_kernel[bound] = cost
                        # the earlier reading (its delta kernel left out), beside the full one
                        total.update({f"{bound}_without_delta": total[bound] - delta_kernel[bound] for bound in ("max", "sum")})
                        total.update(outside=0.0, sum_with_outside=total["sum"])  # no torch work outside its kernels
                        result["totals"][f"sm_{cap}"].setdefault("tutorial", {})[str(L)] = total
                except Exception as e:  # noqa: BLE001 (a tutorial's version this triton cannot compile)
                    result["meta"].setdefault("notes", []).append(
                        f"sm_{cap}: the tutorial did not compile ({str(e).splitlines()[0][:200]}): no tutorial ratio")
    rope_calls, rmod = record_rope(lengths[0])
    for cap in archs:
        for launch in rope_calls:
            read = read_kernel(compile_launch(getattr(rmod, launch["kernel"]), launch["args"], launch["kwargs"], cap),
                               cap)
            name = f"rotate_rows TRANSPOSE={launch['kwargs'].get('TRANSPOSE')}"
            result["kernels"][f"sm_{cap}"].setdefault("rope", {})[name] = read
    result["meta"]["seconds"] = round(time.time() - started, 1)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, default=float) + "\n")
    print(markdown(result))


class _quiet_stderr:
    """fd 2 into a temporary file while MLIR writes there (a failed pass dumps its reproducer)."""

    def __enter__(self):
        import os
        sys.stderr.flush()
        self.file = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)

    def __exit__(self, *exc):
        import os
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.close()


def _summarise(ops):
    by = {}
    for o in ops:
        e = by.setdefault(o["op"], dict(count=0, flops=0, bytes=0))
        e["count"] += 1
        e["flops"] += o["flops"]
        e["bytes"] += o["bytes"]
    return by


def _reading(variant: str):
    """(causal, padded) of a totals key (:func:`reading_key`)."""
    padded = not variant.endswith(NO_PADDING)
    base = variant if padded else variant[:-len(NO_PADDING)]
    return base.endswith(" causal"), padded


def markdown(result) -> str:
    lines = [f"# Static cost of the Triton kernels (triton {result['meta']['triton']}, compiled without a GPU; "
             f"B {B}, H {H}, D {D}, fp16, a padded sentence, and without padding)", ""]
    for arch, per in result["kernels"].items():
        lines += [f"## {arch}", "", "| variant | kernel | tile | regs | spills B (st/ld) | smem KB | CTAs/SM | "
                  "main loops: instrs (pipelined) | nested loops | cycles/tile sum (tensor, issue, fp32, alu, mufu, lsu) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for variant, kernels in per.items():
            for name, r in kernels.items():
                loops_txt = ", ".join(f"{lp['instructions']} ({'yes' if lp['pipelined'] else 'NO'})"
                                      for lp in r["main_loops"]) or "-"
                nested = sum(len(lp["nested_loops"]) for lp in r["main_loops"])
                cyc = "; ".join(f"{lp['cycles']['sum']:.0f} (" + ", ".join(f"{lp['cycles'][u]:.0f}" for u in UNITS[:6])
                                + ")" for lp in r["main_loops"]) or "-"
                tile = "-" if not r.get("block_m") else (f"{r['block_m']}x{r['block_n']}" if r.get("block_n")
                                                         else f"{r['block_m']} rows")
                in_loops = sum(lp.get("spill_instructions", 0) for lp in r["main_loops"])
                spills = f"{r['spill_stores']}/{r['spill_loads']}" + (f" ({in_loops} in loops)" if in_loops else "")
                lines.append(f"| {variant} | {name} | {tile} | {r['regs']} | {spills} | "
                             f"{r['shared_bytes'] / 1024:.0f} | {r['ctas_per_sm']} | {loops_txt} | {nested} | {cyc} |")
        lines.append("")
        totals = result["totals"].get(arch, {})
        lengths = [str(n) for n in result["meta"]["lengths"]]
        lines += ["| variant | " + " | ".join(f"L {n}: fwd+bwd kcycles (sum) | vs terms off | vs tutorial"
                                              for n in lengths) + " |",
                  "|---|" + "---|---|---|" * len(lengths)]
        for variant, per_l in totals.items():
            cells = []
            for n in lengths:
                t = per_l[n]["sum"]
                causal, padded = _reading(variant)
                off = totals.get(reading_key("terms off", causal, padded), {}).get(n)
                tut = totals.get("tutorial", {}).get(n)
                cells += [f"{t / 1e3:.0f}", f"{t / off['sum']:.2f}" if off else "-",
                          f"{t / tut['sum']:.2f}" if tut and not causal else "-"]
            lines.append(f"| {variant} | " + " | ".join(cells) + " |")
        lines += ["", "With the torch work outside the kernels (each op at its roofline, docstring 6.):", "",
                  "| variant | " + " | ".join(f"L {n}: kcycles outside | sum + outside | vs tutorial" for n in lengths)
                  + " |", "|---|" + "---|---|---|" * len(lengths)]
        for variant, per_l in totals.items():
            cells = []
            for n in lengths:
                t, tut = per_l[n], totals.get("tutorial", {}).get(n)
                cells += [f"{t['outside'] / 1e3:.0f}", f"{t['sum_with_outside'] / 1e3:.0f}",
                          f"{t['sum_with_outside'] / tut['sum_with_outside']:.2f}"
                          if tut and not _reading(variant)[0] else "-"]
            lines.append(f"| {variant} | " + " | ".join(cells) + " |")
        tut = totals.get("tutorial", {})
        if all("sum_without_delta" in tut.get(n, {}) for n in lengths):
            lines += ["", "The tutorial without its delta kernel (the earlier reading): " + ", ".join(
                f"L {n} {tut[n]['sum_without_delta'] / 1e3:.0f} kcycles" for n in lengths) + "."]
        lines.append("")
    lines += ["## Work outside the kernels (torch ops, forward + backward, per call of B x H)", "",
              "The launches of each GPU have its blocks, so a path's torch work can differ between them.", "",
              "| arch | variant | L | MFLOP | MB moved | ops |", "|---|---|---|---|---|---|"]
    for arch, per in result["outside_torch"].items():
        for variant, per_l in per.items():
            for n, w in per_l.items():
                top = sorted(w["ops"].items(), key=lambda kv: -kv[1]["bytes"])[:4]
                ops = ", ".join(f"{k} x{v['count']}" for k, v in top)
                lines.append(f"| {arch} | {variant} | {n} | {w['flops'] / 1e6:.1f} | {w['bytes'] / 1e6:.1f} | {ops} |")
    lines += [f"- note: {n}" for n in result["meta"].get("notes", [])]
    lines += ["", f"_{result['meta']['seconds']} s; a static model, not a timing (see the module docstring)._"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
