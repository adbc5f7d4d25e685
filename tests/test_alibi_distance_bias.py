"""ALiBi on the CPU distance-bias path (fairseq_attn_core/backends/distance/bias_path.py): torch's CPU flash
kernel with the penalty as its mask, the hand-written backward (which sets probabilities below
exp(-60) to 0 to keep subnormal numbers out of its products).

Checked against a dense float64 softmax whose penalty ``-m_h |i - j|`` is written out by a loop,
at a length where the far keys' probabilities fall below that cut (slope 1/2, distances up to
149), and through a whole layer against the explicit path; and the chooser's choice.
"""

import torch
from torch.testing import assert_close

from attn_helpers import auto_matches_explicit, make_args, make_attention, path_name
from fairseq_attn_core import backends
from distance_refs import alibi64
from fairseq_attn_core.backends.distance import NEGLIGIBLE_EXP, DistanceTerms, distance_attention
from fairseq_attn_core.pieces.alibi import alibi_slopes


def test_alibi_distance_bias_matches_dense_reference_with_negligible_keys_cut():
    B, H, T, D = 2, 8, 150, 8
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[1, :20] = True  # left padding
    slopes = alibi_slopes(H)
    assert slopes[0] * (T - 1) > -NEGLIGIBLE_EXP  # the first head's far keys are cut
    scale = D ** -0.5
    dout = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    results = []
    for fn in (lambda: distance_attention(DistanceTerms(slopes=tuple(slopes)), q, k, v, scale, "kernel", 64, kpm)[0],
               lambda: alibi64(q, k, v, slopes, scale, kpm)[0]):
        out = fn()
        grads = torch.autograd.grad(out, (q, k, v), dout)
        results.append((out, *grads))
    for got, ref in zip(*results):
        assert_close(got, ref, rtol=1e-10, atol=1e-10)


def test_alibi_layer_on_distance_bias_equals_explicit():
    auto_matches_explicit(make_args("alibi"), "distance bias", policy=backends.Policy(distance_bias_min_len=4))


def test_auto_on_cpu_takes_the_distance_bias_path_for_long_alibi_encoder_self_attention():
    n = backends.DEFAULT.distance_bias_min_len
    attn = make_attention(make_args("alibi"), backend="auto")
    assert path_name(attn, tgt_len=n, src_len=n) == "distance bias"
    assert path_name(attn, tgt_len=n - 1, src_len=n - 1) == "fused"
    assert path_name(attn, tgt_len=n, src_len=n, attn_mask=True) == "fused"  # the decoder
    assert path_name(attn, tgt_len=n, src_len=n, on_cuda=True) == "flex piece"
    assert path_name(make_attention(make_args("alibi"), backend="fused"), tgt_len=n, src_len=n) == "fused"
