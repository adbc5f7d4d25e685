"""The torch modes of the family: one autograd Function (:class:`DistanceAttention`) computes
``softmax(scale q k^T + the gathered term) v (+ the value term)`` a block of queries at a time,
keeps only the output and the log-sum-exp per query, and recomputes each block's
probabilities in its backward, which gives q, k, v and the tables their gradients. Half
inputs run in float32 (the explicit path's softmax is float32 too; in bf16 the recomputed
probabilities doubled the gradients' error), and a query without any allowed key gets
log-sum-exp +inf once: zero probabilities, output and gradients (the core's convention).
Three forwards, one per :data:`MODES`:

* ``blocks``: each block's scores explicitly (the query-block path: relpos kv/tied);
* ``kernel``: a bias of the distance alone as the mask of torch's fused kernel
  (:mod:`.fused`), which returns the log-sum-exp (the distance-bias path: t5bias, alibi);
  the blocks' backward;
* ``far``: where a clip k exists, the far-key split (the region split, :mod:`.far`).
"""

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import Tensor

from .far import far_split_backward, far_split_forward
from .fused import KERNELS, DeviceKernels
from .terms import INF, DistanceTerms, per_row, spans, without_keys

MODES = ("blocks", "kernel", "far")
#: the backward sets probabilities below exp(NEGLIGIBLE_EXP) ~ 9e-27 to 0 (19 orders of
#: magnitude below float32's resolution): their products with the gradients are subnormal
#: numbers, which the CPU multiplies many times slower (ALiBi's far keys: 1.68x stock time
#: at L = 512 with them, 1.21x without)
NEGLIGIBLE_EXP = -60.0


# ---------------------------------------------------------------------------
# The entry point
# ---------------------------------------------------------------------------
@dataclass
class Plan:
    """What a call of :class:`DistanceAttention` runs besides its tensors."""

    mode: str
    scale: float
    block: int
    kernels: DeviceKernels
    clip: Optional[int] = None
    idx: Optional[Tensor] = None  # (T, S) table rows
    kpm: Optional[Tensor] = None  # (B, S) True = pad
    add: Optional[Tensor] = None  # (T, S) fairseq's additive mask, finite part
    keep: Optional[Tensor] = None  # (B|1, 1, T|1, S) True = may attend
    blocks: int = 0  # query blocks the forward ran


def distance_attention(terms: DistanceTerms, q: Tensor, k: Tensor, v: Tensor, scale: float,
                       mode: str, block: int, key_padding_mask: Optional[Tensor] = None,
                       attn_mask: Optional[Tensor] = None) -> Tuple[Tensor, int]:
    """``softmax(scale q k^T + term) v + value term`` with ``terms``' tables' gradients.

    q: (B, H, T, D) at positions ``S - T .. S - 1``; k, v: (B, H, S, D) at 0..S-1;
    key_padding_mask (B, S) True = pad; attn_mask fairseq's (T, S) mask, float (0 / -inf) or
    bool (True = masked), ``blocks`` mode only. ``kernel`` and ``far`` need queries = keys
    and no attn_mask; ``kernel`` a bias only, ``far`` a clip. Returns the output (B, H, T, D)
    in q's dtype and the number of query blocks its forward (``kernel``: its backward) runs."""
    if mode not in MODES:
        raise ValueError(f"distance_attention: mode must be one of {list(MODES)} (got {mode!r})")
    B, H, T, D = q.shape
    S = k.size(2)
    acc = torch.promote_types(q.dtype, torch.float32)
    plan = Plan(mode, scale, max(1, min(block, T)), KERNELS[q.device.type], terms.clip,
                kpm=key_padding_mask)
    q_pos = torch.arange(S - T, S, device=q.device)
    if terms.clip is not None and mode != "far":
        plan.idx = terms.rows(q_pos, torch.arange(S, device=q.device))
    # the bias of every distance j - i the call has, -(S - 1) .. T - 1, in column j - i + T - 1
    rel_bias = None if mode == "far" else terms.bias(torch.arange(1 - S, T, device=q.device), acc)
    if mode == "blocks":
        plan.add, plan.keep = _masks(attn_mask, key_padding_mask, acc)
    elif key_padding_mask is not None and mode == "kernel":
        plan.keep = ~key_padding_mask[:, None, None, :]
    tables = [None if t is None else t.to(acc) for t in (terms.key_table, terms.value_table)]
    out = DistanceAttention.apply(plan, q.to(acc), k.to(acc), v.to(acc), *tables,
                                  None if rel_bias is None else rel_bias.to(acc))
    return out.to(q.dtype), plan.blocks


def _masks(attn_mask, kpm, dtype):
    """fairseq's mask and the padding as (additive (T, S) or None, allowed or None)."""
    add, keep = None, None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = ~attn_mask
        else:
            add = attn_mask.to(dtype)
    if kpm is not None:
        pad_keep = ~kpm[:, None, None, :]  # (B, 1, 1, S)
        keep = pad_keep if keep is None else keep & pad_keep
    return add, keep



def bias_rows(rel_bias: Tensor, first: int, last: int, S: int) -> Tensor:
    """Rows ``[first, last)`` of the bias (H, last - first, S), ``rel_bias[:, j - i + T - 1]``
    for a per-distance bias (H, T + S - 1)."""
    T = rel_bias.size(1) - S + 1
    # row i is the slice [T - 1 - i, T - 1 - i + S): one copy per row, the fastest of the gathers
    return torch.stack([rel_bias[:, T - 1 - i: T - 1 - i + S] for i in range(first, last)], 1)


class DistanceAttention(torch.autograd.Function):
    """Forward and backward of :func:`distance_attention` (see the module docstring)."""

    @staticmethod
    def forward(ctx, plan, q, k, v, table_k, table_v, rel_bias):
        if plan.mode == "far":
            out, saved = far_split_forward(plan, q, k, v, table_k, table_v)
        else:
            forward = _kernel_forward if plan.mode == "kernel" else _blocks_forward
            out, lse = forward(plan, q, k, v, table_k, table_v, rel_bias)
            saved = (lse,)
        ctx.plan = plan
        ctx.save_for_backward(q, k, v, table_k, table_v, rel_bias, out, *saved)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, table_k, table_v, rel_bias, out, *saved = ctx.saved_tensors
        dout = dout.contiguous()
        if ctx.plan.mode == "far":
            grads = far_split_backward(ctx.plan, dout, q, k, v, table_k, table_v, out, *saved) + (None,)
        else:
            want_bias = rel_bias is not None and ctx.needs_input_grad[6]
            grads = _blocks_backward(ctx.plan, dout, q, k, v, table_k, table_v, rel_bias, out,
                                     saved[0], want_bias)
        return (None,) + grads


# ---------------------------------------------------------------------------
# blocks / kernel: forward and the shared backward
# ---------------------------------------------------------------------------
def _row_mask(x: Optional[Tensor], a: int, e: int) -> Optional[Tensor]:
    """The block's rows of a (.., T|1, S) mask or bias."""
    return x if x is None or x.size(-2) == 1 else x[..., a:e, :]


def _add_terms(plan: Plan, x: Tensor, qa: Optional[Tensor], rel_bias: Optional[Tensor],
               a: int, e: int) -> Tensor:
    """``x`` (B, H, e - a, S) plus what the block's scores add to ``scale q k^T``: the gathered
    key term, the distance bias, fairseq's additive mask; -inf where a key is not allowed.
    A new tensor unless there is nothing to add."""
    B, H, n, S = x.shape
    given = x
    if qa is not None:
        x = x + qa[:, :, a:e].gather(-1, plan.idx[a:e].expand(B, H, n, S))
    if rel_bias is not None:
        x = x + bias_rows(rel_bias, a, e, S)
    if plan.add is not None:
        x = x + plan.add[a:e]
    keep = _row_mask(plan.keep, a, e)
    if keep is not None:
        x = x.masked_fill(~keep, -INF) if x is given else x.masked_fill_(~keep, -INF)
    return x


def _blocks_forward(plan, q, k, v, table_k, table_v, rel_bias):
    B, H, T, D = q.shape
    out = q.new_empty(B, H, T, D)
    lse = q.new_empty(B, H, T)
    kT = k.transpose(-1, -2).contiguous()  # a transposed view is several times slower in CPU matmuls
    qa = None if table_k is None else torch.matmul(q, table_k.t()) * plan.scale
    R = None if table_v is None else table_v.size(0)
    query_spans = spans(T, plan.block)
    for a, e in query_spans:
        s = _add_terms(plan, torch.matmul(q[:, :, a:e], kT).mul_(plan.scale), qa, rel_bias, a, e)
        block_lse = torch.logsumexp(s, dim=-1)
        lse[:, :, a:e] = without_keys(block_lse, torch.isneginf(block_lse))
        p = torch.exp(s - lse[:, :, a:e, None])
        o = torch.matmul(p, v)
        if R is not None:
            o = o + torch.matmul(per_row(p, plan.idx[a:e].expand_as(p), R), table_v)
        out[:, :, a:e] = o
    plan.blocks = len(query_spans)
    return out, lse


def _kernel_forward(plan, q, k, v, table_k, table_v, rel_bias):
    """The fused kernel with the distance bias (H, T, T) as its mask; a sentence with padding
    gets its own masked copy (one call each)."""
    q, k, v = (t.contiguous() for t in (q, k, v))
    B, H, T, D = q.shape
    bias = bias_rows(rel_bias.detach(), 0, T, T)  # (H, T, T)
    kpm = plan.kpm
    if kpm is None or not kpm.any():
        out, lse = plan.kernels.forward(q, k, v, bias[None], plan.scale)
    else:
        out, lse = torch.empty_like(q), q.new_empty(B, H, T)
        for b in range(B):
            pad = kpm[b]
            mask = bias.masked_fill(pad, -INF) if pad.any() else bias
            out[b:b + 1], lse[b:b + 1] = plan.kernels.forward(q[b:b + 1], k[b:b + 1], v[b:b + 1],
                                                              mask[None], plan.scale)
        empty = kpm.all(-1)  # a sentence without any key
        if empty.any():
            out[empty] = 0.0
            lse = without_keys(lse, empty[:, None, None])
    plan.blocks = len(spans(T, plan.block))  # those of the backward
    return out, lse.to(q.dtype)


def _blocks_backward(plan, dout, q, k, v, table_k, table_v, rel_bias, out, lse, want_bias):
    """Per block: ``P = exp(scores - lse)`` recomputed, ``dS = P (dO v^T (+ dO w_V^T gathered)
    - rowsum(dO * O))``, and from them every gradient (dS summed per table row for w_K, per
    distance for the bias; P per table row for w_V)."""
    scale = plan.scale
    B, H, T, D = q.shape
    S = k.size(2)
    q, k, v = (t.contiguous() for t in (q, k, v))
    delta = (dout * out).sum(-1, keepdim=True)  # (B, H, T, 1)
    lse = lse[..., None]
    qs, ks = q * scale, k * scale
    kt, vt = (t.flatten(0, 1).transpose(1, 2) for t in (k, v))  # (B H, D, S)
    qa = None if table_k is None else torch.matmul(qs, table_k.t())  # (B, H, T, 2k+1)
    dqa = None if table_k is None else torch.zeros_like(qa)
    dov = None if table_v is None else torch.matmul(dout, table_v.t())  # dO_i . w_V[r]
    dtable_v = None if table_v is None else torch.zeros_like(table_v)
    dq = torch.empty_like(q)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    dk3, dv3 = dk.view(B * H, S, D), dv.view(B * H, S, D)
    drel = torch.zeros_like(rel_bias) if want_bias else None
    keys = torch.arange(S, device=q.device)
    for a, e in spans(T, plan.block):
        n = e - a
        p = _add_terms(plan, (-lse[:, :, a:e]).expand(B, H, n, S), qa, rel_bias, a, e).contiguous()
        p3 = p.view(B * H, n, S).baddbmm_(qs[:, :, a:e].flatten(0, 1), kt)
        p3 = p3.masked_fill_(p3 < NEGLIGIBLE_EXP, -INF).exp_()  # P, see NEGLIGIBLE_EXP
        do = dout[:, :, a:e]
        dv3.baddbmm_(p3.transpose(1, 2), do.flatten(0, 1))
        dp = torch.bmm(do.flatten(0, 1), vt).view_as(p)
        if table_v is not None:
            where = plan.idx[a:e].expand(B, H, n, S)
            dp.add_(dov[:, :, a:e].gather(-1, where))
            dtable_v += per_row(p, where, table_v.size(0)).flatten(0, 2).t() @ do.flatten(0, 2)
        ds = dp.sub_(delta[:, :, a:e]).mul_(p)  # dS
        del p, p3
        dq[:, :, a:e] = torch.matmul(ds, ks)
        dk3.baddbmm_(ds.flatten(0, 1).transpose(1, 2), qs[:, :, a:e].flatten(0, 1))
        if dqa is not None:
            dqa[:, :, a:e] = per_row(ds, plan.idx[a:e].expand(B, H, n, S), table_k.size(0))
        if want_bias:
            dist = (keys[None, :] - torch.arange(a, e, device=q.device)[:, None] + T - 1).flatten()
            drel.index_add_(1, dist, ds.sum(0).flatten(1))
    dtable_k = None
    if dqa is not None:
        dq += torch.matmul(dqa, table_k) * scale
        dtable_k = (dqa.flatten(0, 2).t() @ q.flatten(0, 2)) * scale
    return dq, dk, dv, dtable_k, dtable_v, drel

