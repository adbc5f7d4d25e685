"""The launchers of the Triton distance kernels (:mod:`.triton_kernels`) and their autograd
Function: ``softmax(scale q k^T + term(j - i)) v (+ Shaw's value term)`` for a declaration
with a bias of the distance (t5bias's table by bucket, alibi's slopes) or Shaw's tables
(relpos k, kv, tied), with the tables' gradients.

The bucket of every distance the call has, ``j - i = -(S - 1) .. T - 1``, is computed once
per call by the declaration's own bucket function (S + T - 1 integers) and read in the kernel
by ``j - i``: T5's float32 logarithm of another library could land a distance on the
neighbouring bucket at a boundary, this way the kernel's buckets are the piece's. The
(N, H) table is read per pair in the kernel; its gradient comes back as per-program partial
sums that torch adds up (deterministic, no atomics). Shaw's key term enters as
``QA = scale q w_K^T`` (B, H, T, 2k + 1), one matmul here in float32, whose gradient dQA the
kernel returns (dS summed per table row): autograd carries it to q and w_K. Shaw's value
term: the kernel returns PB (B, H, T, 2k + 1), each query's probability mass per clipped
distance, and ``PB a_V`` is one matmul here; autograd gives ``d a_V = PB^T dO`` and hands the
kernel's backward ``dPB = dO a_V^T``, which it gathers by distance into dP.

Inputs in fp16 or bf16 (the kernels accumulate in float32), or float32 / float64 (the CPU
tests under ``TRITON_INTERPRET=1``: float64 accumulators for float64 inputs). triton is
imported when a call first runs (:func:`kernels`): this module imports without it.
"""

from types import ModuleType
from typing import Optional

import torch
from torch import Tensor

from .terms import DistanceTerms
from .triton_configs import KernelConfigs, configs_for, head_block

HALF = (torch.float16, torch.bfloat16)


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
        raise ValueError("triton_attention: the Triton kernels run a bias of the distance or Shaw's tables")
    module = module or kernels()
    configs = configs or configs_for(q.size(-1))
    B, H, T, D = q.shape
    S = k.size(2)
    device = q.device
    if terms.bias_table is not None:
        bucket = terms.bucket(torch.arange(1 - S, T, device=device)).to(torch.int32).contiguous()
    else:
        bucket = torch.zeros(1, dtype=torch.int32, device=device)
    slopes = torch.tensor(terms.slopes if terms.slopes is not None else (0.0,), dtype=torch.float32,
                          device=device)
    qa = None
    if terms.key_table is not None:  # QA = scale q w_K^T, float32 at least
        acc = torch.promote_types(q.dtype, torch.float32)
        qa = torch.matmul(q.to(acc), terms.key_table.to(acc).t()) * scale
    pad = None if key_padding_mask is None else key_padding_mask.to(torch.uint8).contiguous()
    bias = 1 if terms.bias_table is not None else 2 if terms.slopes is not None else 0  # the kernels' BIAS
    out, pb = _TritonAttention.apply(q, k, v, terms.bias_table, qa, bucket, slopes, pad, bias, terms.clip or 0,
                                     terms.value_table is not None, causal, float(scale), configs, module)
    if terms.value_table is None:
        return out
    return out + torch.matmul(pb, terms.value_table.to(pb.dtype)).to(out.dtype)


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


def _pow2(n: int) -> int:
    return max(16, 1 << (n - 1).bit_length())


class _TritonAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, table, qa, bucket, slopes, pad, bias, clip, values, causal, scale, configs, module):
        B, H, T, D = q.shape
        S = k.size(2)
        q3, k3, v3 = (t.reshape(B * H, -1, D).contiguous() for t in (q, k, v))
        acc, precision = _launch_args(q, module)
        lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        out = torch.empty_like(q3)
        lse = torch.empty(B * H, T, dtype=lse_dtype, device=q.device)
        table_c = table.detach().contiguous() if table is not None else slopes  # placeholders: never read
        qa_c = qa.detach().reshape(B * H, T, -1).contiguous() if qa is not None else slopes
        pad_c = pad if pad is not None else bucket
        R = 2 * clip + 1
        pb = torch.empty(B * H, T, R if values else 0, dtype=lse_dtype, device=q.device)
        common = dict(BIAS=bias, KEYS=qa is not None, VALUES=values, CAUSAL=causal, HAS_PAD=pad is not None,
                      RB=_pow2(R), BLOCK_D=head_block(D), ACC=acc, PRECISION=precision)
        c = configs.forward_values if values else configs.forward
        module.forward[(_cdiv(T, c.block_m), B * H)](
            q3, k3, v3, out, lse, pb if values else lse, pad_c, bucket, table_c, slopes, qa_c,
            scale, T, S, H, D, S - T, R, clip,
            BLOCK_M=c.block_m, BLOCK_N=c.block_n, num_warps=c.num_warps, num_stages=c.num_stages, **common)
        ctx.save_for_backward(q3, k3, v3, out, lse, table_c, qa_c, bucket, slopes, pad_c, pb)
        ctx.meta = (B, H, T, S, D, R, clip, scale, configs, module, common,
                    None if table is None else table.dtype)
        if not values:
            ctx.mark_non_differentiable(pb)
        return out.view(B, H, T, D), pb.view(B, H, T, pb.size(-1))

    @staticmethod
    def backward(ctx, dout, dpb):
        q3, k3, v3, out, lse, table_c, qa_c, bucket, slopes, pad, pb = ctx.saved_tensors
        B, H, T, S, D, R, clip, scale, configs, module, common, table_dtype = ctx.meta
        do = dout.reshape(B * H, T, D).contiguous()
        delta = (do.to(lse.dtype) * out.to(lse.dtype)).sum(-1)  # rowsum(dO * O), (B H, T)
        values = common["VALUES"]
        if values:  # dP_ij = dO_i . v_j + dPB[i, clip(j - i) + k]: delta_i = sum_j P_ij dP_ij
            dpb = (torch.zeros_like(pb) if dpb is None else dpb.reshape(B * H, T, R).to(lse.dtype)).contiguous()
            delta = delta + (pb * dpb).sum(-1)
        dq, dk, dv = torch.empty_like(q3), torch.empty_like(k3), torch.empty_like(v3)
        table_grad = table_dtype is not None and ctx.needs_input_grad[3]
        keys = common["KEYS"]
        ckv, cq = configs.backward_kv, configs.backward_q
        tiles = _cdiv(S, ckv.block_n)
        nb = _pow2(table_c.size(0)) if table_grad else 16
        dtable = torch.zeros(B * H * tiles * nb if table_grad else 1, dtype=lse.dtype, device=q3.device)
        dqa = torch.empty(B * H, T, R, dtype=lse.dtype, device=q3.device) if keys else lse
        module.backward_kv[(tiles, B * H)](
            q3, k3, v3, do, lse, delta, dk, dv, dtable, pad, bucket, table_c, slopes, qa_c, dpb if values else lse,
            scale, T, S, H, D, S - T, R, clip, TABLE_GRAD=table_grad, NB=nb,
            BLOCK_M=ckv.block_m, BLOCK_N=ckv.block_n, num_warps=ckv.num_warps, num_stages=ckv.num_stages, **common)
        module.backward_q[(_cdiv(T, cq.block_m), B * H)](
            q3, k3, v3, do, lse, delta, dq, dqa, pad, bucket, table_c, slopes, qa_c, dpb if values else lse,
            scale, T, S, H, D, S - T, R, clip,
            BLOCK_M=cq.block_m, BLOCK_N=cq.block_n, num_warps=cq.num_warps, num_stages=cq.num_stages, **common)
        d_table = None
        if table_grad:
            N = table_c.size(0)
            per_head = dtable.view(B, H, tiles, nb).sum((0, 2))  # (H, nb): the partial sums added up
            d_table = per_head[:, :N].t().to(table_dtype).contiguous()
        shape = (B, H, -1, D)
        d_qa = dqa.view(B, H, T, R) if keys else None
        return (dq.view(shape), dk.view(shape), dv.view(shape), d_table, d_qa) + (None,) * 10


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)
