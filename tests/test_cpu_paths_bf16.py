"""The CPU paths that `auto` takes for long encoder self-attention, in bf16.

The region split (relpos) and the distance bias (t5bias) run torch's CPU flash kernel and a
hand-written backward, the query blocks (relpos, the decoder) a hand-written backward;
``--bf16`` training takes them like fp32. Each runs a whole layer in
bf16 with padding, against the same layer in float64 on the explicit path: output, input
gradient and every parameter gradient, norm-wise, each no worse than the explicit path in
bf16 (bf16 keeps 8 bits of mantissa: about 1e-2 here). Both paths compute in float32 for
bf16 inputs (the one kernel family of fairseq_attn_core/backends/distance/); in bf16 their
gradients' error was about 3x the explicit path's.
"""

import pytest
import torch

from attn_helpers import make_args, make_attention, padded_batch, path_name
from fairseq_attn_core import backends

#: norm-wise relative error allowed in bf16
BF16_TOL = 3e-2

# thresholds lowered, several query blocks (the region split's with far keys)
CASES = {
    "region split": (dict(pieces="relpos", relpos_k=3), backends.Policy(blocked_min_len=8, region_block=8)),
    "distance bias": (dict(pieces="t5bias", t5_buckets=8, t5_max_distance=6),
                      backends.Policy(distance_bias_min_len=8, distance_block=8)),
    "query blocks": (dict(pieces="relpos", relpos_k=3, side="decoder"),
                     backends.Policy(blocked_min_len=8, query_block=8)),
}


def relative_error(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("path", list(CASES))
def test_cpu_path_in_bf16_against_float64_explicit(path):
    flags, policy = CASES[path]
    flags = dict(flags)
    side = flags.pop("side", "encoder")
    args = make_args(flags.pop("pieces"), **flags)
    T = 40
    # decoders pad on the right (a left-padded causal row would have no key at all)
    x, kpm = padded_batch([T, T - 9, T - 23], embed_dim=32, left_pad=side == "encoder")
    mask = torch.triu(torch.full((T, T), float("-inf")), 1) if side == "decoder" else None
    runs = []
    for backend, dtype in (("auto", torch.bfloat16), ("explicit", torch.float64),
                           ("explicit", torch.bfloat16)):
        attn = make_attention(args, side=side, backend=backend, embed_dim=32, num_heads=4, dtype=dtype,
                              policy=policy)
        with torch.no_grad():  # the same weights in both, the piece's tables non-zero
            g = torch.Generator().manual_seed(5)
            for p in attn.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        assert path_name(attn, tgt_len=T, src_len=T, attn_mask=mask is not None) == (
            path if backend == "auto" else "explicit")
        xi = x.to(dtype).requires_grad_(True)
        y, _ = attn(xi, xi, xi, key_padding_mask=kpm, need_weights=False,
                    attn_mask=None if mask is None else mask.to(dtype))
        assert attn.last_run[0] == (path if backend == "auto" else "explicit")
        y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(3)).to(dtype))
        runs.append((y.detach(), xi.grad, {n: p.grad for n, p in attn.named_parameters()}))
    (y16, x16, g16), (y64, x64, g64), (ye, xe, ge) = runs
    assert y16.dtype == torch.bfloat16 and torch.isfinite(y16.float()).all()
    assert set(g16) == set(g64)
    # k_proj.bias adds q . b to every score of a query: softmax ignores it, its gradient is 0
    # up to rounding (a sum over keys of dk), so it has no relative error to speak of
    pairs = {"output": (y16, ye, y64), "input gradient": (x16, xe, x64),
             **{n: (g16[n], ge[n], g64[n]) for n in g64 if n != "k_proj.bias"}}
    for name, (path16, explicit16, reference) in pairs.items():
        err, err_explicit = relative_error(path16, reference), relative_error(explicit16, reference)
        # no worse than the explicit path in bf16 (whose softmax is float32), and small
        assert err < 1.5 * err_explicit + 1e-3 and err < BF16_TOL, (name, err, err_explicit)
