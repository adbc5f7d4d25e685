"""The Triton kernel of RoPE's rotation (:mod:`.rope_fused` launches it; this module imports
triton and is imported only by a call that runs it).

One pass over the rows of x (rows = B H L, each D wide, position ``POS[row % L]``): each pair
``(x1, x2) = (x_{2i}, x_{2i+1})`` of the first ``rot`` dimensions becomes
``(x1 cos + x2 sin_even, x2 cos + x1 sin_odd)`` with the tables of
:func:`..pieces.rope.rotation_tables` (``sin_even = -sin``, ``sin_odd = +sin``): the products and
the sum of :func:`..pieces.rope.rotate`, in float32 (float64 for float64 inputs); the other
dimensions are copied. ``TRANSPOSE``: the transposed rotation (the backward), the two sines
swapped.
"""

import triton
import triton.language as tl


@triton.jit
def rotate_rows(X, Y, POS, COS, SIN, rows, L, D, rot, TRANSPOSE: tl.constexpr, PAIRS: tl.constexpr,
                REST: tl.constexpr, BLOCK_R: tl.constexpr, ACC: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    in_rows = r < rows
    pos = tl.load(POS + r % L, mask=in_rows, other=0)
    i = tl.arange(0, PAIRS)
    m = in_rows[:, None] & (2 * i < rot)[None, :]
    x_off = r[:, None] * D + 2 * i[None, :]
    t_off = pos[:, None] * rot + 2 * i[None, :]
    x1 = tl.load(X + x_off, mask=m, other=0.0).to(ACC)
    x2 = tl.load(X + x_off + 1, mask=m, other=0.0).to(ACC)
    c = tl.load(COS + t_off, mask=m, other=0.0)
    s_even = tl.load(SIN + t_off, mask=m, other=0.0)
    s_odd = tl.load(SIN + t_off + 1, mask=m, other=0.0)
    if TRANSPOSE:
        y1 = x1 * c + x2 * s_odd
        y2 = x2 * c + x1 * s_even
    else:
        y1 = x1 * c + x2 * s_even
        y2 = x2 * c + x1 * s_odd
    tl.store(Y + x_off, y1.to(Y.dtype.element_ty), mask=m)
    tl.store(Y + x_off + 1, y2.to(Y.dtype.element_ty), mask=m)
    if REST > 0:  # the dimensions past rot pass unrotated
        cols = rot + tl.arange(0, REST)
        mc = in_rows[:, None] & (cols < D)[None, :]
        off = r[:, None] * D + cols[None, :]
        tl.store(Y + off, tl.load(X + off, mask=mc, other=0.0), mask=mc)
