"""torch's fused attention with a log-sum-exp, per device type (:data:`KERNELS`): the same
Python runs on CPU (torch's CPU flash kernel) and CUDA (the memory-efficient kernel, which
takes a float mask and returns the log-sum-exp; matched float64 in fp16 and bf16 on an H200).
"""

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F


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
#: why a path that runs torch's CPU flash kernel cannot run here (None: it can)
NO_CPU_KERNEL = None if HAVE_CPU_KERNEL else "torch has no CPU flash attention kernel (needs torch >= 2.2)"
