"""Distance terms as data, and the one kernel family that runs them.

A position piece declares its relative structure (:class:`DistanceTerms`, returned by
``AttentionPiece.distance_terms``) instead of implementing a method per path:

* relpos (Shaw et al. 2018): a key table and a value table ``(2k + 1, D)`` and the clip k,
  ``e_ij += scale q_i . w_K[clip(j - i)]``, ``z_i += sum_j p_ij w_V[clip(j - i)]``;
* t5bias: a bias table ``(N, H)`` read by bucket, ``e_ij += b[bucket(j - i), h]``;
* alibi: fixed slopes, ``e_ij -= m_h |j - i|``.

This module owns the kernels for them: one autograd Function (:class:`DistanceAttention`)
computes ``softmax(scale q k^T + the gathered term) v (+ the value term)`` a block of queries
at a time, keeps only the output and the log-sum-exp per query, and recomputes each block's
probabilities in its backward, which gives q, k, v and the tables their gradients. Half
inputs run in float32 (the explicit path's softmax is float32 too; in bf16 the recomputed
probabilities doubled the gradients' error), and a query without any allowed key gets
log-sum-exp +inf once: zero probabilities, output and gradients (the core's convention).
Three forwards, one per :data:`MODES`:

* ``blocks``: each block's scores explicitly (the query-block path: relpos kv/tied);
* ``kernel``: a bias of the distance alone as the mask of torch's fused kernel, which returns
  the log-sum-exp (the distance-bias path: t5bias, alibi); the blocks' backward;
* ``far``: where a clip k exists, the far-key split (the region split): per block of queries
  the keys more than k away see one constant term per query, so each far region is plain
  attention through the fused kernel, and only the strip of ``block + 2k`` keys around the
  block is explicit; the three are combined by their log-sum-exps, and the backward gives the
  far keys to the kernel's backward as part of the whole softmax.

The fused kernels are reached through one small per-device table (:data:`KERNELS`), so that
the same Python runs on CPU (torch's CPU flash kernel) and CUDA (the memory-efficient kernel,
which takes a float mask and returns the log-sum-exp; matched float64 in fp16 and bf16 on an
H200, and ``auto`` takes them on CUDA where they were measured faster:
:class:`.policy.Policy`). The flex_attention forms of the same declarations:
:mod:`.distance_flex`.
"""

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

MODES = ("blocks", "kernel", "far")
#: the backward sets probabilities below exp(NEGLIGIBLE_EXP) ~ 9e-27 to 0 (19 orders of
#: magnitude below float32's resolution): their products with the gradients are subnormal
#: numbers, which the CPU multiplies many times slower (ALiBi's far keys: 1.68x stock time
#: at L = 512 with them, 1.21x without)
NEGLIGIBLE_EXP = -60.0
INF = float("inf")


# ---------------------------------------------------------------------------
# The declaration
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class DistanceForm:
    """What the chooser knows of a layer's distance terms at build: no tensors."""

    clip: Optional[int] = None  # relpos: k
    keys: bool = False  # a key table
    values: bool = False  # a value table
    bias: Optional[str] = None  # "buckets" (t5bias) or "slopes" (alibi)

    # the paths each form opens (read by the paths' ``takes``, see base.Path)
    @property
    def flex(self) -> bool:
        """flex_attention without the probability matrix: a value term rebuilt from the
        log-sum-exp, or fixed slopes in the score_mod (a learned table's gradient inside a
        compiled score_mod is unmeasured: t5bias keeps the distance-bias path)."""
        return self.values or self.bias == "slopes"

    @property
    def far_split(self) -> bool:
        """The far-key split needs a clip: beyond it the term is one constant per query."""
        return self.clip is not None

    @property
    def query_blocks(self) -> bool:
        """A value term: the query blocks keep no probability matrix for the backward
        (keys only run fused)."""
        return self.values

    @property
    def learned_bias(self) -> bool:
        """A bias table learned by bucket (t5bias): the SDPA paths train it through a bias that
        requires grad (alibi's slopes are fixed)."""
        return self.bias == "buckets"

    @property
    def bias_kernel(self) -> bool:
        """A bias of the distance alone (no table read with q): the fused kernel's mask."""
        return self.bias is not None and not (self.keys or self.values)


@dataclass(frozen=True, eq=False)
class DistanceTerms:
    """A piece's terms of the key-query distance ``j - i`` (see the module docstring)."""

    key_table: Optional[Tensor] = None  # (2 clip + 1, D), with clip
    value_table: Optional[Tensor] = None  # (2 clip + 1, D), with a key table
    clip: Optional[int] = None
    bias_table: Optional[Tensor] = None  # (N, H)
    bucket: Optional[Callable[[Tensor], Tensor]] = None  # distances (long) -> bucket rows
    slopes: Optional[Tuple[float, ...]] = None  # (H,)

    def __post_init__(self):
        tables = self.key_table is not None
        if tables != (self.clip is not None) or (self.value_table is not None and not tables):
            raise ValueError("DistanceTerms: a key table and its clip come together; a value table needs them")
        if (self.bias_table is None) != (self.bucket is None):
            raise ValueError("DistanceTerms: a bias table and its bucket function come together")
        if self.bias_table is not None and self.slopes is not None:
            raise ValueError("DistanceTerms: a bias table or slopes, not both")

    @property
    def form(self) -> DistanceForm:
        bias = "buckets" if self.bias_table is not None else "slopes" if self.slopes is not None else None
        return DistanceForm(self.clip, self.key_table is not None, self.value_table is not None, bias)

    def rows(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """(T, S) long: ``clip(j - i, k) + k``, the table row of each pair."""
        return (k_pos[None, :] - q_pos[:, None]).clamp(-self.clip, self.clip) + self.clip

    def bias(self, distances: Tensor, dtype: torch.dtype) -> Optional[Tensor]:
        """(H, *distances.shape): the bias of each head at the given key - query distances,
        the slopes' penalty in ``dtype`` promoted to float32 at least (``None``: no bias)."""
        if self.bias_table is not None:
            return self.bias_table[self.bucket(distances)].movedim(-1, 0)
        if self.slopes is None:
            return None
        m = torch.tensor(self.slopes, dtype=torch.promote_types(dtype, torch.float32),
                         device=distances.device)
        return -m.view(-1, *[1] * distances.dim()) * distances.abs().to(m.dtype)

    def score_bias(self, q: Tensor, q_pos: Tensor, k_pos: Tensor, scale: float) -> Optional[Tensor]:
        """The term added to ``scale q_i . k_j``, (B|1, H, T, S) in q's dtype (the explicit
        and fused paths' hook)."""
        out = None
        if self.key_table is not None:
            B, H, T, _ = q.shape
            idx = self.rows(q_pos, k_pos)
            # q against every table row once, then pick the row of each (i, j)
            q_rows = torch.matmul(q, self.key_table.to(q.dtype).t())  # (B, H, T, 2k+1)
            out = q_rows.gather(-1, idx.expand(B, H, T, idx.size(-1))) * scale
        bias = self.bias(k_pos[None, :] - q_pos[:, None], q.dtype)
        if bias is not None:
            out = bias[None].to(q.dtype) if out is None else out + bias[None].to(q.dtype)
        return out

    def value_term(self, probs: Tensor, q_pos: Tensor, k_pos: Tensor) -> Optional[Tensor]:
        """``sum_j p_ij w_V[clip(j - i)]`` (B, H, T, D) from probabilities (B, H, T, S)."""
        if self.value_table is None:
            return None
        B, H, T, S = probs.shape
        idx = self.rows(q_pos, k_pos).expand(B, H, T, S)
        # sum the probabilities falling on each table row, then one small matmul
        return torch.matmul(_per_row(probs, idx, 2 * self.clip + 1), self.value_table.to(probs.dtype))


def _per_row(x: Tensor, idx: Tensor, rows: int) -> Tensor:
    """``x`` (..., S) summed per table row ``idx`` (..., S): (..., rows)."""
    return x.new_zeros(x.shape[:-1] + (rows,)).scatter_add_(-1, idx, x)


# ---------------------------------------------------------------------------
# The fused kernels, per device
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceKernels:
    """``forward(q, k, v, mask, scale) -> (out, lse (B, H, T))`` and
    ``backward(dout, q, k, v, mask, out, lse, scale) -> (dq, dk, dv)``; mask additive
    (B|1, H|1, T, S) or None, in q's dtype."""

    forward: Callable
    backward: Callable


def _cpu_forward(q, k, v, mask, scale):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False,
                                                                       attn_mask=mask, scale=scale)


def _cpu_backward(dout, q, k, v, mask, out, lse, scale):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        dout, q, k, v, out, lse, 0.0, False, attn_mask=mask, scale=scale)


def _cuda_mask(q, k, mask):
    """The efficient kernel's bias: always given (its backward takes no None), its rows
    16-aligned as SDPA lays them out (a view of a wider tensor)."""
    B, H, T, _ = q.shape
    S = k.size(2)
    wide = -(-S // 16) * 16
    full = q.new_zeros(B, H, T, wide)
    if mask is not None:
        full[..., :S] = mask
    return full[..., :S]


def _cuda_forward(q, k, v, mask, scale):
    out, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, _cuda_mask(q, k, mask), True, 0.0, False, scale=scale)
    return out, lse[..., : q.size(2)]  # the kernel pads the rows of its lse to 32


def _cuda_backward(dout, q, k, v, mask, out, lse, scale):
    T = q.size(2)
    lse = F.pad(lse, (0, -(-T // 32) * 32 - T))
    philox = torch.zeros((), dtype=torch.int64, device=q.device)  # no dropout
    dq, dk, dv, _ = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
        dout, q, k, v, _cuda_mask(q, k, mask), out, lse, philox, philox, 0.0,
        [True, True, True, False], False, scale=scale)
    return dq, dk, dv


#: torch's fused attention with a log-sum-exp, per device type
KERNELS = {
    "cpu": DeviceKernels(_cpu_forward, _cpu_backward),
    "cuda": DeviceKernels(_cuda_forward, _cuda_backward),
}
HAVE_CPU_KERNEL = hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward")


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


def without_keys(lse: Tensor, empty: Tensor) -> Tensor:
    """The empty-row rule, once for every forward: a query without any allowed key (``empty``)
    gets log-sum-exp +inf, so that every recomputed probability ``exp(s - lse)`` is 0 and its
    output and gradients are zeros (the core's convention), never ``exp(-inf - -inf)`` = NaN."""
    return lse.masked_fill(empty, INF)


def _spans(T: int, block: int) -> Tuple[Tuple[int, int], ...]:
    return tuple((a, min(T, a + block)) for a in range(0, T, block))


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
            out, saved = _far_forward(plan, q, k, v, table_k, table_v)
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
            grads = _far_backward(ctx.plan, dout, q, k, v, table_k, table_v, out, *saved) + (None,)
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
    spans = _spans(T, plan.block)
    for a, e in spans:
        s = _add_terms(plan, torch.matmul(q[:, :, a:e], kT).mul_(plan.scale), qa, rel_bias, a, e)
        block_lse = torch.logsumexp(s, dim=-1)
        lse[:, :, a:e] = without_keys(block_lse, torch.isneginf(block_lse))
        p = torch.exp(s - lse[:, :, a:e, None])
        o = torch.matmul(p, v)
        if R is not None:
            o = o + torch.matmul(_per_row(p, plan.idx[a:e].expand_as(p), R), table_v)
        out[:, :, a:e] = o
    plan.blocks = len(spans)
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
    plan.blocks = len(_spans(T, plan.block))  # those of the backward
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
    for a, e in _spans(T, plan.block):
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
            dtable_v += _per_row(p, where, table_v.size(0)).flatten(0, 2).t() @ do.flatten(0, 2)
        ds = dp.sub_(delta[:, :, a:e]).mul_(p)  # dS
        del p, p3
        dq[:, :, a:e] = torch.matmul(ds, ks)
        dk3.baddbmm_(ds.flatten(0, 1).transpose(1, 2), qs[:, :, a:e].flatten(0, 1))
        if dqa is not None:
            dqa[:, :, a:e] = _per_row(ds, plan.idx[a:e].expand(B, H, n, S), table_k.size(0))
        if want_bias:
            dist = (keys[None, :] - torch.arange(a, e, device=q.device)[:, None] + T - 1).flatten()
            drel.index_add_(1, dist, ds.sum(0).flatten(1))
    dtable_k = None
    if dqa is not None:
        dq += torch.matmul(dqa, table_k) * scale
        dtable_k = (dqa.flatten(0, 2).t() @ q.flatten(0, 2)) * scale
    return dq, dk, dv, dtable_k, dtable_v, drel


# ---------------------------------------------------------------------------
# far: the far-key split (a clip k; queries = keys, no attn_mask)
# ---------------------------------------------------------------------------
def far_spans(T: int, block: int, half: int) -> Tuple[Tuple[int, int, int, int, int], ...]:
    """``(side, a, e, j0, j1)``: the query block ``[a, e)`` against its far keys ``[j0, j1)``,
    side 0 the left ones (``j < a - half``), 1 the right ones (``j >= e + half``)."""
    out = []
    for a, e in _spans(T, block):
        if a - half > 0:
            out.append((0, a, e, 0, a - half))
        if e + half < T:
            out.append((1, a, e, e + half, T))
    return tuple(out)


def key_mask(q: Tensor, key_padding_mask: Optional[Tensor]) -> Optional[Tensor]:
    """The kernel's additive mask (B, 1, 1, S) of a padding mask (B, S) True = pad."""
    if key_padding_mask is None:
        return None
    B, S = key_padding_mask.shape
    return q.new_zeros(B, 1, 1, S).masked_fill(key_padding_mask[:, None, None, :], -INF)


def far_forward(kernels: DeviceKernels, q: Tensor, k: Tensor, v: Tensor,
                key_padding_mask: Optional[Tensor], block: int, half: int,
                scale: float) -> Tuple[Tensor, Tensor, Tensor]:
    """Plain attention of each query block ``[a, e)`` (queries = keys) over the keys left of
    its strip, ``j < a - half``, and right of it, ``j >= e + half``: two rectangular kernel
    calls per block (the CPU kernel computes whole key blocks of up to 512 keys, so one causal
    call per region would cost a full attention each; the rectangles skip the strip instead).

    Returns, side 0 the left keys, 1 the right ones: out (2, B, H, T, D) (0 where a query has
    no such key), the kernel's log-sum-exp of the scaled scores (2, B, H, T) for
    :func:`far_backward` (0 where padding leaves a block no key, ``-inf`` where no span covers
    the rows), and ``lse``, the same with ``-inf`` wherever the query has no such key."""
    B, H, T, D = q.shape
    mask = key_mask(q, key_padding_mask)
    out = q.new_zeros(2, B, H, T, D)
    kernel_lse = q.new_full((2, B, H, T), -INF, dtype=torch.promote_types(q.dtype, torch.float32))
    for side, a, e, j0, j1 in far_spans(T, block, half):
        o, s = kernels.forward(q[:, :, a:e], k[:, :, j0:j1], v[:, :, j0:j1],
                               None if mask is None else mask[..., j0:j1], scale)
        out[side, :, :, a:e] = o
        kernel_lse[side, :, :, a:e] = s
    lse = kernel_lse
    if key_padding_mask is not None:  # the kernel gives a row without keys lse 0: mark it
        kept = F.pad((~key_padding_mask).cumsum(1), (1, 0))  # (B, T + 1): keys before j
        empty = torch.zeros(2, B, 1, T, dtype=torch.bool, device=q.device)
        for side, a, e, j0, j1 in far_spans(T, block, half):
            empty[side, :, 0, a:e] = (kept[:, j1] - kept[:, j0] == 0)[:, None]
        lse = lse.masked_fill(empty, -INF)
    return out, kernel_lse, lse


def far_backward(kernels: DeviceKernels, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                 kernel_lse: Tensor, key_padding_mask: Optional[Tensor], block: int, half: int,
                 scale: float, dq: Tensor, dk: Tensor, dv: Tensor) -> None:
    """Add the far regions' share of the gradients to dq, dk, dv (B, H, T, D): the kernel's
    backward per span, given per side the rows' output gradient ``dout`` (2, B, H, T, D) and
    an ``out`` (2, B, H, T, D) whose ``dout_i . out_i`` is the softmax's ``delta_i`` (the
    kernel's ``dS_ij = P_ij (dout_i . v_j - dout_i . out_i)``): the caller decides what the
    rows are part of (the region's own output, or the whole softmax)."""
    mask = key_mask(q, key_padding_mask)
    for side, a, e, j0, j1 in far_spans(q.size(2), block, half):
        gq, gk, gv = kernels.backward(dout[side, :, :, a:e], q[:, :, a:e], k[:, :, j0:j1], v[:, :, j0:j1],
                                      None if mask is None else mask[..., j0:j1], out[side, :, :, a:e],
                                      kernel_lse[side, :, :, a:e], scale)
        dq[:, :, a:e] += gq
        dk[:, :, j0:j1] += gk
        dv[:, :, j0:j1] += gv


class _Strip:
    """The strips of the far split: block n's rows ``n block + r`` against the keys
    ``n block - k + c`` (c < W = block + 2k), as (B, H, nb, block, W)."""

    def __init__(self, q: Tensor, kmax: int, block: int, key_padding_mask: Optional[Tensor]):
        B, H, T, D = q.shape
        self.T, self.kmax, self.block = T, kmax, block
        self.nb = -(-T // block)
        self.Tp, self.W = self.nb * block, block + 2 * kmax
        r = torch.arange(block, device=q.device)[:, None]
        c = torch.arange(self.W, device=q.device)
        self.rel = ((c - kmax - r).clamp(-kmax, kmax) + kmax).expand(B, H, self.nb, block, self.W)
        j = (torch.arange(self.nb, device=q.device) * block - kmax)[:, None, None] + c  # (nb, 1, W)
        valid = (j >= 0) & (j < T)
        if key_padding_mask is not None:
            valid = (valid & ~key_padding_mask[:, j.clamp(0, T - 1)]).unsqueeze(1)  # (B, 1, nb, 1, W)
        self.invalid = ~valid

    def rows(self, x: Tensor, fill: float = 0.0) -> Tensor:
        """(B, H, T, n) -> (B, H, nb, block, n), rows past T filled with ``fill``."""
        if self.Tp > self.T:
            x = F.pad(x, (0, 0, 0, self.Tp - self.T), value=fill)
        return x.view(x.shape[:2] + (self.nb, self.block, x.size(-1)))

    def unrows(self, x: Tensor) -> Tensor:
        """(B, H, nb, block, n) -> (B, H, T, n)."""
        return x.reshape(x.shape[:2] + (self.Tp, x.size(-1)))[:, :, : self.T]

    def windows(self, x: Tensor) -> Tensor:
        """(B, H, T, D) -> each block's keys (B, H, nb, W, D), zero outside [0, T)."""
        padded = F.pad(x, (0, 0, self.kmax, self.Tp + self.kmax - self.T))
        return padded.unfold(2, self.W, self.block).transpose(-1, -2).contiguous()

    def unwindows(self, g: Tensor) -> Tensor:
        """The transpose of :meth:`windows`: (B, H, nb, W, D) -> (B, H, T, D)."""
        B, H, nb, W, D = g.shape
        block, k2 = self.block, 2 * self.kmax
        if k2 > block:  # windows overlapping more than their neighbours
            size = [B, H, self.Tp + k2, D]
            full = torch.ops.aten.unfold_backward(g.transpose(-1, -2), size, 2, W, block)
        else:  # each window: its own block, then the first 2k rows of the next one
            full = g.new_zeros(B, H, self.Tp + block, D)
            full[:, :, : self.Tp].view(B, H, nb, block, D).add_(g[..., :block, :])
            full[:, :, block:].view(B, H, nb, block, D)[..., :k2, :].add_(g[..., block:, :])
        return full[:, :, self.kmax: self.kmax + self.T]

    def scores(self, q, kw, qa, scale):
        """``scale q_i . (k_j + w_K[clip(j - i)])`` (B, H, nb, block, W), -inf off the keys."""
        s = torch.matmul(self.rows(q), kw.transpose(-1, -2)).mul_(scale).add_(self.rows(qa).gather(-1, self.rel))
        return s.masked_fill_(self.invalid, -INF)

    def per_distance(self, x: Tensor) -> Tensor:
        """Sum (B, H, nb, block, W) per clipped distance: (B, H, T, 2k+1)."""
        return self.unrows(_per_row(x, self.rel, 2 * self.kmax + 1))


def _far_forward(plan, q, k, v, table_k, table_v):
    """Per block ``[a, e)``: the far left keys ``j < a - k`` see ``c^L_i = scale q_i . w_K[-k]``
    for all of them, so the region is plain attention (the kernel) with output ``o^L_i`` and
    log-sum-exp ``lse^L_i + c^L_i``; the far right likewise with ``w_K[+k]``; the strip
    ``a - k <= j < e + k`` explicitly. With ``lse_i`` over the three, the far regions' masses
    ``m^L_i = exp(lse^L_i + c^L_i - lse_i)``, ``m^R_i``, the strip's ``p_ij``::

        z_i = m^L_i (o^L_i + w_V[-k]) + m^R_i (o^R_i + w_V[+k]) + sum_j p_ij (v_j + w_V[clip(j - i)])
    """
    kmax, scale, block, kpm = plan.clip, plan.scale, plan.block, plan.kpm
    R = 2 * kmax + 1
    st = _Strip(q, kmax, block, kpm)
    qa = torch.matmul(q, table_k.t()) * scale  # (B, H, T, 2k+1)
    kw, vw = st.windows(k), st.windows(v)
    s = st.scores(q, kw, qa, scale)
    far_out, kernel_lse, far_lse = far_forward(plan.kernels, q, k, v, kpm, block, kmax, scale)
    far_lse = far_lse.to(q.dtype) + torch.stack([qa[..., 0], qa[..., R - 1]])  # (2, B, H, T)
    top = torch.maximum(st.unrows(s.amax(-1, keepdim=True))[..., 0], far_lse.amax(0))
    top = top.masked_fill(torch.isneginf(top), 0.0)
    p = torch.exp(s.sub_(st.rows(top[..., None])))  # the strip's exp(e_ij - top_i)
    total = st.unrows(p.sum(-1, keepdim=True))[..., 0] + torch.exp(far_lse - top).sum(0)
    lse = without_keys(top + torch.log(total), total == 0)
    p.mul_(st.rows(torch.exp(top - lse)[..., None]))  # exp(e_ij - lse_i)
    mass = torch.exp(far_lse - lse)[..., None]  # (2, B, H, T, 1): m^L, m^R
    z = st.unrows(torch.matmul(p, vw)) + (mass * far_out).sum(0)
    if table_v is not None:
        z = z + torch.matmul(st.per_distance(p), table_v) + mass[0] * table_v[0] + mass[1] * table_v[R - 1]
    plan.blocks = st.nb
    return z, (lse, far_out, kernel_lse, mass)


def _far_backward(plan, dz, q, k, v, table_k, table_v, z, lse, far_out, kernel_lse, mass):
    """With ``P_ij`` over all keys and ``a_ij = w_V[clip(j - i)]``,
    ``dS_ij = P_ij (dz_i . (v_j + a_ij) - delta_i)``, ``delta_i = dz_i . z_i``. On the far left
    ``P_ij = m^L_i P^L_ij`` and ``a_ij = w_V[-k]``, so ``dS_ij = P^L_ij (dO_i . v_j - dO_i .
    (z_i - w_V[-k]))`` with ``dO = m^L dz``: the kernel's backward given ``dO`` and
    ``z - w_V[-k]`` as its output. The region's constant gets the sum of its ``dS``,
    ``m^L_i dz_i . (o^L_i + w_V[-k] - z_i)``. The strip's ``dS`` is recomputed explicitly."""
    kmax, scale, block, kpm = plan.clip, plan.scale, plan.block, plan.kpm
    R = 2 * kmax + 1
    st = _Strip(q, kmax, block, kpm)
    qa = torch.matmul(q, table_k.t()) * scale
    kw, vw = st.windows(k), st.windows(v)
    p = torch.exp(st.scores(q, kw, qa, scale).sub_(st.rows(lse[..., None], INF)))
    delta = (dz * z).sum(-1)  # (B, H, T)
    dzb = st.rows(dz)
    dp = torch.matmul(dzb, vw.transpose(-1, -2))  # (B, H, nb, block, W): dz_i . v_j
    if table_v is not None:
        dp.add_(st.rows(torch.matmul(dz, table_v.t())).gather(-1, st.rel))  # + dz_i . a_ij
    del vw
    ds = dp.sub_(st.rows(delta[..., None])).mul_(p)  # d loss / d scores of the strip
    dq = st.unrows(torch.matmul(ds, kw).mul_(scale))
    del kw
    dk = st.unwindows(torch.matmul(ds.transpose(-1, -2), st.rows(q)).mul_(scale))
    dv = st.unwindows(torch.matmul(p.transpose(-1, -2), dzb))
    dqa = st.per_distance(ds)  # (B, H, T, 2k+1)
    # the far regions: the kernel's backward as part of the whole softmax
    rows_v = [table_v[0], table_v[R - 1]] if table_v is not None else [0.0, 0.0]
    for side, col in ((0, 0), (1, R - 1)):
        dqa[..., col] += mass[side, ..., 0] * (dz * (far_out[side] + rows_v[side] - z)).sum(-1)
    far_backward(plan.kernels, mass * dz, q, k, v, torch.stack([z - rows_v[0], z - rows_v[1]]),
                 kernel_lse, kpm, block, kmax, scale, dq, dk, dv)
    dq += torch.matmul(dqa, table_k) * scale
    dtable_k = (dqa.flatten(0, 2).t() @ q.flatten(0, 2)) * scale
    dtable_v = None
    if table_v is not None:
        per_row = st.per_distance(p)
        per_row[..., 0] += mass[0, ..., 0]
        per_row[..., R - 1] += mass[1, ..., 0]
        dtable_v = per_row.flatten(0, 2).t() @ dz.flatten(0, 2)
    return dq, dk, dv, dtable_k, dtable_v
