"""The far-key split of a clipped distance (relpos; queries = keys, no attn_mask): per block of
queries the keys more than k away see one constant term per query, so each far region is
plain attention through torch's fused kernel (:mod:`.fused`), and only the strip of
``block + 2k`` keys around the block is explicit; the three are combined by their
log-sum-exps, and the backward gives the far keys to the kernel's backward as part of the
whole softmax (the region-split path, :mod:`..regions`; mode ``far`` of :mod:`.modes`).
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .fused import DeviceKernels
from .terms import INF, per_row, spans, without_keys


def farspans(T: int, block: int, half: int) -> Tuple[Tuple[int, int, int, int, int], ...]:
    """``(side, a, e, j0, j1)``: the query block ``[a, e)`` against its far keys ``[j0, j1)``,
    side 0 the left ones (``j < a - half``), 1 the right ones (``j >= e + half``)."""
    out = []
    for a, e in spans(T, block):
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
    for side, a, e, j0, j1 in farspans(T, block, half):
        o, s = kernels.forward(q[:, :, a:e], k[:, :, j0:j1], v[:, :, j0:j1],
                               None if mask is None else mask[..., j0:j1], scale)
        out[side, :, :, a:e] = o
        kernel_lse[side, :, :, a:e] = s
    lse = kernel_lse
    if key_padding_mask is not None:  # the kernel gives a row without keys lse 0: mark it
        kept = F.pad((~key_padding_mask).cumsum(1), (1, 0))  # (B, T + 1): keys before j
        empty = torch.zeros(2, B, 1, T, dtype=torch.bool, device=q.device)
        for side, a, e, j0, j1 in farspans(T, block, half):
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
    for side, a, e, j0, j1 in farspans(q.size(2), block, half):
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
        return self.unrows(per_row(x, self.rel, 2 * self.kmax + 1))


def far_split_forward(plan, q, k, v, table_k, table_v):
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


def far_split_backward(plan, dz, q, k, v, table_k, table_v, z, lse, far_out, kernel_lse, mass):
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
