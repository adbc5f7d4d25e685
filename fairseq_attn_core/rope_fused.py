"""RoPE's rotation as one Triton kernel, forward and backward: the same
function as :func:`.pieces.rope.rotate` (the same cached cos / sin tables, the same products
and sum in float32), in one elementwise pass instead of the cast, the pair swap, two products,
a sum and a concatenation. CUDA; the tests run it on CPU under Triton's interpreter.

Not yet taken by the rope piece: no GPU has timed it (benchmarks/triton_distance_bench.py
``--rope`` does, in the prepared device run). triton is imported by the first call.
"""

from types import ModuleType
from typing import Optional

import torch
from torch import Tensor

ROWS = 32  # rows per program


def kernels() -> ModuleType:
    from . import rope_kernels
    return rope_kernels


def fused_rotate(x: Tensor, pos: Tensor, rot: int, base: float, length: Optional[int] = None,
                 module: Optional[ModuleType] = None) -> Tensor:
    """:func:`.pieces.rope.rotate` through the Triton kernel: x (..., L, D), positions (L,)."""
    from .pieces.rope import rotation_tables
    acc = torch.promote_types(x.dtype, torch.float32)
    if length is None:
        length = int(pos.max()) + 1 if pos.numel() else 0
    cos, sin = rotation_tables(length, rot, base, x.device, acc)
    return _Rotation.apply(x, pos.to(torch.int32).contiguous(), cos, sin, rot, module or kernels())


def _launch(module, x, pos, cos, sin, rot, transpose):
    D, L = x.size(-1), x.size(-2)
    x2 = x.contiguous()
    y = torch.empty_like(x2)
    rows = x2.numel() // D
    if rows:
        tl = module.tl
        module.rotate_rows[(-(-rows // ROWS),)](
            x2, y, pos, cos, sin, rows, L, D, rot, TRANSPOSE=transpose,
            PAIRS=max(1, 1 << (rot // 2 - 1).bit_length()),
            REST=0 if rot == D else 1 << (D - rot - 1).bit_length(),
            BLOCK_R=ROWS, ACC=tl.float64 if cos.dtype == torch.float64 else tl.float32)
    return y


class _Rotation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, pos, cos, sin, rot, module):
        ctx.save_for_backward(pos, cos, sin)
        ctx.meta = (rot, module)
        return _launch(module, x, pos, cos, sin, rot, False)

    @staticmethod
    def backward(ctx, dy):
        pos, cos, sin = ctx.saved_tensors
        rot, module = ctx.meta
        return _launch(module, dy, pos, cos, sin, rot, True), None, None, None, None, None
