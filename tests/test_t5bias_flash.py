"""t5bias on the CPU distance-bias path (fairseq_attn_core/backends/distance/bias_path.py, the kernels of
fairseq_attn_core/backends/distance/modes.py, mode ``kernel``): torch's CPU
flash kernel with the bucket bias as its mask, and a hand-written backward that gives q, k, v
and the bucket table their gradients without a (B, H, T, S) tensor.

Checked against the float64 T5 reference (distance_refs.py: the bias of every (i, j) picked
by a loop through T5's bucketing written out; output and the gradients of q, k, v and the table; no
padding, left and right padding, a sentence of padding only, T below and above the maximum
distance), through a whole layer against the explicit path, and the chooser's choice of it.
"""

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import auto_matches_explicit, key_padding, make_args, make_attention, path_name
from distance_refs import t5bias64
from fairseq_attn_core import AttentionSite, backends
from fairseq_attn_core.backends.distance import distance_attention
from fairseq_attn_core.pieces.t5bias import T5RelativeBias

F64 = dict(rtol=1e-10, atol=1e-10)
BUCKETS, MAX_DISTANCE = 8, 6


def t5_piece(H):
    site = AttentionSite(side="encoder", layer_idx=0, num_layers=1, num_heads=H, head_dim=4)
    piece = T5RelativeBias(site, BUCKETS, MAX_DISTANCE).double()
    with torch.no_grad():
        piece.bucket_bias.normal_(0, 1, generator=torch.Generator().manual_seed(7))
    return piece


def forward_and_grads(fn, tensors, seed):
    out = fn(*tensors)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return out.detach(), torch.autograd.grad(out, tensors, g)


@pytest.mark.parametrize("block", [3, 128])
@pytest.mark.parametrize("T,pads", [
    (12, None),  # no padding; T above the maximum distance 6: the last buckets shared
    (12, [0, 3, 9]),  # left padding of different amounts
    (12, [-2, 0, -7]),  # right padding
    (5, None),  # T below the maximum distance
    (5, [1, 0, -2]),
    (10, [0, 10, 4]),  # the second sentence is all padding: every row of it empty
])
def test_distance_bias_path_matches_dense_reference(T, pads, block):
    B, H, D = 3, 2, 4
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64).requires_grad_() for _ in range(3))
    piece = t5_piece(H)
    table = piece.bucket_bias
    kpm = key_padding(B, T, pads)
    scale = D ** -0.5

    def path(q, k, v, table):
        return distance_attention(piece.distance_terms(), q, k, v, scale, "kernel", block, kpm)[0]

    def reference(q, k, v, table):
        return t5bias64(q, k, v, table, BUCKETS, MAX_DISTANCE, scale, kpm)[0]

    got, got_grads = forward_and_grads(path, [q, k, v, table], seed=T)
    ref, ref_grads = forward_and_grads(reference, [q, k, v, table], seed=T)
    assert torch.isfinite(got).all() and all(torch.isfinite(d).all() for d in got_grads)
    assert_close(got, ref, **F64)
    for name, a, b in zip(["q", "k", "v", "bucket table"], got_grads, ref_grads):
        assert_close(a, b, **F64, msg=lambda m: f"grad of {name}: {m}")
    assert got_grads[3].abs().sum() > 0
    if pads is not None and T in pads:  # a sentence of padding only: zeros, not NaN
        b = pads.index(T)
        for t in (got[b], got_grads[0][b], got_grads[1][b], got_grads[2][b]):
            assert_close(t, torch.zeros_like(t))


def test_distance_bias_layer_equals_explicit_forward_and_backward():
    """Through the core (the positions and masks it gives the path) against the explicit path,
    the threshold and the backward's block lowered by the layer's policy: 3 blocks of 4 rows."""
    args = make_args("t5bias", t5_buckets=BUCKETS, t5_max_distance=MAX_DISTANCE)
    policy = backends.Policy(distance_bias_min_len=4, distance_block=4)
    grads = auto_matches_explicit(args, "distance bias", init=lambda attn: attn.pieces[0].bucket_bias.normal_(
        0, 1, generator=torch.Generator().manual_seed(2)), policy=policy, blocks=3)
    assert "pieces.0.bucket_bias" in grads


def test_auto_on_cpu_takes_the_distance_bias_path_for_long_encoder_self_attention():
    attn = make_attention(make_args("t5bias"), backend="auto")
    n = backends.DEFAULT.distance_bias_min_len
    long_ = dict(tgt_len=n, src_len=n)
    assert path_name(attn, **long_) == "distance bias"
    assert path_name(attn, tgt_len=4 * n, src_len=4 * n) == "distance bias"
    assert path_name(attn, tgt_len=n - 1, src_len=n - 1) == "fused"
    # the decoder's masked self-attention and its incremental steps: SDPA
    decoder = make_attention(make_args("t5bias"), side="decoder")
    assert path_name(decoder, attn_mask=True, **long_) == "fused"
    assert path_name(decoder, incremental=True, tgt_len=1, src_len=n) == "fused"
    # attention dropout, weights, queries that are not the keys, CUDA, a forced backend
    assert path_name(attn, dropout_p=0.1, **long_) == "fused"
    assert path_name(attn, need_weights=True, **long_) == "explicit"
    assert path_name(attn, tgt_len=n, src_len=n + 1) == "fused"
    assert path_name(attn, on_cuda=True, **long_) == "fused"
    for forced in ("fused", "explicit"):
        assert path_name(make_attention(make_args("t5bias"), backend=forced), **long_) == forced
    # another piece changing the scores in the same layer: the bias alone is not the layer's
    two = make_attention(make_args("t5bias,csan1d", csan_window=3, csan_layers="0"), backend="auto")
    assert path_name(two, **long_) == "fused"
    reasons = backends.reasons(attn._layer, backends.Call(attn_mask=True, dropout_p=0.1, incremental=True,
                                                          **long_))
    why = reasons["distance bias"]
    assert any("attn_mask" in r for r in why)
    assert any("attention dropout" in r for r in why)
    assert any("incremental" in r for r in why)


def test_the_length_sweep_measures_t5bias_auto():
    """``--sweep lengths`` lists t5bias's ``auto`` (the distance-bias path) beside explicit and fused."""
    from fairseq_attn_plugins.bench.systems import position_sweep_systems

    systems = {s.name: s for s in position_sweep_systems(["t5bias/*"])}
    assert list(systems) == ["fairseq", "t5bias/explicit", "t5bias/fused", "t5bias/auto"]
    assert systems["t5bias/auto"].flags["attn_backend"] == "auto"
