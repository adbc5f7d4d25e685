"""The distance kernels (fairseq_attn_core/backends/distance/) on every device of the per-device table,
in half precision: each mode (the far-key split, the fused-kernel forward, the query blocks)
against the float64 references of distance_refs.py, output and the gradients of q, k, v and
the tables, norm-wise (fp16 and bf16 inputs, computed in float32 by the kernels).

On CPU they run here; the CUDA entries (torch's memory-efficient kernel) run on a machine with
a GPU (this file is the numerics step of the device run for the new CUDA paths) and are
skipped elsewhere.
"""

import pytest
import torch

from distance_refs import alibi64, shaw64, t5bias64
from fairseq_attn_core.backends.distance import DistanceTerms, distance_attention
from fairseq_attn_core.pieces.alibi import alibi_slopes
from fairseq_attn_core.pieces.t5bias import relative_position_bucket

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="no CUDA device"))]
#: norm-wise relative error allowed for half inputs (the benchmark's numerics tolerance)
HALF_TOL = 2e-2
B, H, T, D, KMAX, BUCKETS, MAX_DISTANCE = 3, 4, 40, 16, 3, 8, 6


def relative_error(a, b):
    return float((a.detach().double().cpu() - b).norm() / b.norm().clamp_min(1e-12))


def case(method, device, dtype):
    """(the kernels' call, the float64 reference, the differentiable tensors) of one method."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[1, :9] = True  # left padding
    kpm[2, T - 13:] = True  # right padding
    scale = D ** -0.5
    mask = None
    if method == "relpos blocks":  # the decoder: future mask, right padding only
        kpm[1] = False
        mask = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), 1)
    if method.startswith("relpos"):
        wk, wv = (torch.randn(2 * KMAX + 1, D, generator=g, dtype=torch.float64) for _ in range(2))
        tables = [wk, wv]
        terms = lambda wk, wv: DistanceTerms(key_table=wk, value_table=wv, clip=KMAX)  # noqa: E731
        ref = lambda q, k, v, wk, wv: shaw64(q, k, v, wk, wv, KMAX, scale, kpm, attn_mask=mask)[0]  # noqa: E731
        mode = "blocks" if method == "relpos blocks" else "far"
    elif method == "t5bias":
        tables = [torch.randn(BUCKETS, H, generator=g, dtype=torch.float64)]
        bucket = lambda rel: relative_position_bucket(rel, True, BUCKETS, MAX_DISTANCE)  # noqa: E731
        terms = lambda table: DistanceTerms(bias_table=table, bucket=bucket)  # noqa: E731
        ref = lambda q, k, v, table: t5bias64(q, k, v, table, BUCKETS, MAX_DISTANCE, scale, kpm)[0]  # noqa: E731
        mode = "kernel"
    else:  # alibi
        tables = []
        terms = lambda: DistanceTerms(slopes=tuple(alibi_slopes(H)))  # noqa: E731
        ref = lambda q, k, v: alibi64(q, k, v, alibi_slopes(H), scale, kpm)[0]  # noqa: E731
        mode = "kernel"
    inputs = [t.requires_grad_(True) for t in (q, k, v, *tables)]
    # fairseq's --fp16 / --bf16 casts the model: the tables are half too
    on = [t.detach().to(device, dtype).requires_grad_(True) for t in inputs]

    def kernels(q, k, v, *tables):
        return distance_attention(terms(*tables), q, k, v, scale, mode, 8, kpm.to(device),
                                  None if mask is None else mask.to(device, dtype))[0]

    return (kernels, on), (ref, inputs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("method", ["relpos far", "relpos blocks", "t5bias", "alibi"])
def test_distance_kernels_in_half_precision_match_the_float64_reference(method, device, dtype):
    (kernels, on), (ref, inputs) = case(method, device, dtype)
    got, want = kernels(*on), ref(*inputs)
    assert got.dtype == dtype and got.device.type == device
    dout = torch.randn(want.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    got_grads = torch.autograd.grad(got, on, dout.to(device, dtype))
    want_grads = torch.autograd.grad(want, inputs, dout)
    names = ["output", "q", "k", "v", "table", "value table"]
    for name, a, b in zip(names, (got, *got_grads), (want.detach(), *want_grads)):
        assert torch.isfinite(a).all(), name
        assert relative_error(a, b) < HALF_TOL, (name, relative_error(a, b))
