"""The distance-bias path: the layer's only piece adds a bias that depends on the key-query
distance alone, ``bias[h, i, j] = R[h, j - i]`` (t5bias and alibi on CPU: ``distance_bias``), to an
encoder self-attention, run by torch's CPU flash kernel with that bias as its additive mask.

SDPA with a bias that requires grad leaves the flash kernel for the math path, which keeps
the (B, H, T, S) scores and their gradient. Here the forward is the kernel
(``_scaled_dot_product_flash_attention_for_cpu``, bias (1, H, T, S) broadcast over the batch,
built from R without grad; a sentence with padding gets its own masked copy), which returns
the log-sum-exp per query; a hand-written backward keeps q, k, v, the output, the
log-sum-exp and R only, and recomputes, ``BLOCK`` queries at a time,
``P = exp(scale q k^T + bias - lse)`` and ``dS = P (dO v^T - rowsum(dO * O))``, from which
dq, dk, dv (the kernel's own backward would recompute the same P without giving dS) and
R's gradient, dS summed over the batch and along each diagonal j - i. No (B, H, T, S)
tensor is kept; a block's are (B, H, BLOCK, S).

A query whose keys are all padding outputs 0 with zero gradients (the kernel gives it
output 0 and log-sum-exp 0; the backward's masked P is 0). The path runs what it was
built for and declares the rest, so that the chooser skips it: queries = keys without
incremental decoding (positions 0..T-1), no fairseq ``attn_mask``, no attention dropout.
"""

from typing import Optional

import torch
from torch import Tensor

from .base import PiecePath
from .regions import RegionSplit

#: query rows per block of the backward
BLOCK = 128
#: the backward sets probabilities below exp(NEGLIGIBLE_EXP) ~ 9e-27 to 0 (19 orders of
#: magnitude below float32's resolution): their products with the gradients are subnormal
#: numbers, which the CPU multiplies many times slower (ALiBi's far keys: 1.68x stock time
#: at L = 512 with them, 1.21x without)
NEGLIGIBLE_EXP = -60.0


class DistanceBias(PiecePath):
    name = "distance bias"
    own_piece = "distance_bias_path_ok"
    unavailable = RegionSplit.unavailable  # the same kernel
    no_dropout = "its backward recomputes the probabilities without it"
    queries_are_keys = True
    no_attn_mask = "the kernel's one mask carries the distance bias"

    def piece_attention(self, piece, q, k, v, ctx, run):
        return distance_bias_attention(q, k, v, piece.distance_bias(q.size(2)), ctx.key_padding_mask,
                                       run.scale)


def distance_bias_attention(q: Tensor, k: Tensor, v: Tensor, rel_bias: Tensor,
                            key_padding_mask: Optional[Tensor], scale: float,
                            block: int = BLOCK) -> Tensor:
    """``softmax(scale q k^T + bias) v`` with ``bias[h, i, j] = rel_bias[h, j - i + T - 1]``.

    q, k, v: (B, H, T, D), queries = keys at positions 0..T-1; rel_bias (H, 2T - 1), the
    bias of each head for the distances ``1 - T .. T - 1`` (key - query), differentiable;
    key_padding_mask (B, T) True = pad. Returns (B, H, T, D). bf16 / fp16 inputs run in
    float32 and the output is cast back (the explicit path's softmax is float32 too; in bf16
    the recomputed probabilities doubled the gradients' error)."""
    acc = torch.promote_types(q.dtype, torch.float32)
    out = _DistanceBiasFlash.apply(q.to(acc), k.to(acc), v.to(acc), rel_bias.to(acc),
                                   key_padding_mask, scale, max(1, block))
    return out.to(q.dtype)


def bias_rows(rel_bias: Tensor, first: int, last: int) -> Tensor:
    """Rows ``[first, last)`` of the bias (H, last - first, T), ``rel_bias[:, j - i + T - 1]``."""
    T = (rel_bias.size(1) + 1) // 2
    # row i is the slice [T - 1 - i, 2T - 1 - i): one copy per row, the fastest of the gathers
    return torch.stack([rel_bias[:, T - 1 - i: 2 * T - 1 - i] for i in range(first, last)], 1)


def _kernel(q, k, v, mask, scale):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False,
                                                                       attn_mask=mask, scale=scale)


class _DistanceBiasFlash(torch.autograd.Function):
    """Forward and backward of :func:`distance_bias_attention` (see the module docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, rel_bias, key_padding_mask, scale, block):
        q, k, v = (t.contiguous() for t in (q, k, v))  # the backward's matmuls take views of them
        B, H, T, D = q.shape
        bias = bias_rows(rel_bias.detach().to(q.dtype), 0, T)  # (H, T, T)
        if key_padding_mask is None or not key_padding_mask.any():
            key_padding_mask = None
            out, lse = _kernel(q, k, v, bias[None], scale)
        else:  # one call per sentence: the mask is the bias with its padding's columns -inf
            out, lse = torch.empty_like(q), q.new_empty(B, H, T, dtype=torch.promote_types(q.dtype, torch.float32))
            for b in range(B):
                pad = key_padding_mask[b]
                mask = bias.masked_fill(pad, float("-inf")) if pad.any() else bias
                out[b:b + 1], lse[b:b + 1] = _kernel(q[b:b + 1], k[b:b + 1], v[b:b + 1], mask[None], scale)
        ctx.save_for_backward(q, k, v, rel_bias, key_padding_mask, out, lse)
        ctx.scale, ctx.block = scale, block
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, rel_bias, key_padding_mask, out, lse = ctx.saved_tensors
        scale, block = ctx.scale, ctx.block
        B, H, T, D = q.shape
        dout = dout.contiguous()
        delta = (dout * out).sum(-1, keepdim=True)  # (B, H, T, 1)
        lse = lse.to(q.dtype)[..., None]
        bias = rel_bias.detach().to(q.dtype)
        pad = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
        qs, ks = q * scale, k * scale
        kt, vt = (t.flatten(0, 1).transpose(1, 2) for t in (k, v))  # (B H, D, T)
        dq = torch.empty_like(q)
        dk, dv = torch.zeros_like(k), torch.zeros_like(v)
        dk3, dv3 = dk.view(B * H, T, D), dv.view(B * H, T, D)
        want_bias = ctx.needs_input_grad[3]  # a learned bias (t5bias), not a fixed one (alibi)
        drel = torch.zeros(H, 2 * T - 1, dtype=torch.promote_types(q.dtype, torch.float32), device=q.device)
        keys = torch.arange(T, device=q.device)
        for a in range(0, T, block):
            e = min(T, a + block)
            p = torch.sub(bias_rows(bias, a, e), lse[:, :, a:e])  # (B, H, e - a, T): bias - lse
            if pad is not None:
                p.masked_fill_(pad, float("-inf"))
            p3 = p.view(B * H, e - a, T).baddbmm_(qs[:, :, a:e].flatten(0, 1), kt)
            p3 = p3.masked_fill_(p3 < NEGLIGIBLE_EXP, float("-inf")).exp_()  # P, see NEGLIGIBLE_EXP
            dv3.baddbmm_(p3.transpose(1, 2), dout[:, :, a:e].flatten(0, 1))
            ds = torch.bmm(dout[:, :, a:e].flatten(0, 1), vt).view_as(p).sub_(delta[:, :, a:e]).mul_(p)  # dS
            del p, p3
            dq[:, :, a:e] = torch.matmul(ds, ks)
            dk3.baddbmm_(ds.flatten(0, 1).transpose(1, 2), qs[:, :, a:e].flatten(0, 1))
            if want_bias:
                dist = (keys[None, :] - torch.arange(a, e, device=q.device)[:, None] + T - 1).flatten()
                drel.index_add_(1, dist, ds.sum(0).flatten(1).to(drel.dtype))
        return dq, dk, dv, drel.to(rel_bias.dtype) if want_bias else None, None, None, None
