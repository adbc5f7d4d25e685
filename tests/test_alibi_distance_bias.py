"""ALiBi on the CPU distance-bias path (attention/backends/distance_bias.py): torch's CPU flash
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
from fairseq_attn_core.backends.distance_bias import NEGLIGIBLE_EXP, distance_bias_attention
from fairseq_attn_core.pieces.alibi import alibi_slopes


def dense_reference(q, k, v, slopes, kpm, scale):
    B, H, T, D = q.shape
    penalty = torch.empty(H, T, T, dtype=torch.float64)
    for h in range(H):
        for i in range(T):
            for j in range(T):
                penalty[h, i, j] = -slopes[h] * abs(i - j)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * scale + penalty
    scores = scores.masked_fill(kpm[:, None, None, :], float("-inf"))
    return torch.softmax(scores, -1) @ v


def test_alibi_distance_bias_matches_dense_reference_with_negligible_keys_cut():
    B, H, T, D = 2, 8, 150, 8
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[1, :20] = True  # left padding
    slopes = alibi_slopes(H)
    assert slopes[0] * (T - 1) > -NEGLIGIBLE_EXP  # the first head's far keys are cut
    rel = torch.tensor([[-m * abs(d) for d in range(1 - T, T)] for m in slopes], dtype=torch.float64)
    scale = D ** -0.5
    dout = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    results = []
    for fn in (lambda: distance_bias_attention(q, k, v, rel, kpm, scale, block=64),
               lambda: dense_reference(q, k, v, slopes, kpm, scale)):
        out = fn()
        grads = torch.autograd.grad(out, (q, k, v), dout)
        results.append((out, *grads))
    for got, ref in zip(*results):
        assert_close(got, ref, rtol=1e-10, atol=1e-10)


def test_alibi_layer_on_distance_bias_equals_explicit(monkeypatch):
    monkeypatch.setattr(backends, "DISTANCE_BIAS_MIN_LEN", 4)
    auto_matches_explicit(make_args("alibi"), "distance bias")


def test_auto_on_cpu_takes_the_distance_bias_path_for_long_alibi_encoder_self_attention():
    n = backends.DISTANCE_BIAS_MIN_LEN
    attn = make_attention(make_args("alibi"), backend="auto")
    assert path_name(attn, tgt_len=n, src_len=n) == "distance bias"
    assert path_name(attn, tgt_len=n - 1, src_len=n - 1) == "fused"
    assert path_name(attn, tgt_len=n, src_len=n, attn_mask=True) == "fused"  # the decoder
    assert path_name(attn, tgt_len=n, src_len=n, on_cuda=True) == "flex piece"
    assert path_name(make_attention(make_args("alibi"), backend="fused"), tgt_len=n, src_len=n) == "fused"
