"""relpos on the CPU region-split path (fairseq_attn_core/backends/distance/far.py, mode ``far``;
fairseq_attn_core/backends/regions.py).

Each query's keys split into the far left, the band and the far right; the far regions run
torch's CPU flash kernel with a custom backward that also carries the log-sum-exp's
gradient. Checked against the float64 Shaw reference (distance_refs.py: output and the gradients of
q, k, v and both tables, modes kv / k / tied), through a whole layer against the explicit
path, and the chooser's choice of it.
"""

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import auto_matches_explicit, key_padding, make_args, make_attention, path_name
from distance_refs import shaw64
from fairseq_attn_core import backends
from fairseq_attn_core.backends.distance import KERNELS, DistanceTerms, distance_attention
from fairseq_attn_core.backends.distance.far import far_backward, far_forward

F64 = dict(rtol=1e-10, atol=1e-10)
KMAX = 3
CPU = KERNELS["cpu"]


def region_relpos_attention(q, k, v, wk, wv, kmax, kpm, scale, block):
    return distance_attention(DistanceTerms(key_table=wk, value_table=wv, clip=kmax), q, k, v, scale,
                              "far", block, kpm)[0]


def inputs(B, T, D=4, H=2, seed=0):
    g = torch.Generator().manual_seed(seed * 100 + T)
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    wk, wv = (torch.randn(2 * KMAX + 1, D, generator=g, dtype=torch.float64) for _ in range(2))
    return [t.requires_grad_(True) for t in (q, k, v, wk, wv)]


def tables(mode, wk, wv):
    """The value table each mode uses (kv: its own, tied: the key table, k: none)."""
    return {"kv": wv, "tied": wk, "k": None}[mode]


def forward_and_grads(fn, tensors, seed):
    out = fn(*tensors)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    grads = torch.autograd.grad(out, tensors, g, allow_unused=True)
    return out.detach(), [torch.zeros_like(t) if d is None else d for t, d in zip(tensors, grads)]


@pytest.mark.parametrize("block", [2, 5, 7, 64])  # 2 and 5 narrower than 2k
@pytest.mark.parametrize("mode", ["kv", "k", "tied"])
@pytest.mark.parametrize("T,pads", [
    (12, None),  # no padding
    (12, [0, 3, 9]),  # left padding of different amounts: rows whose far left is empty
    (12, [-2, 0, -7]),  # right padding
    (3, [0, 1, 0]),  # T < k + 1: only the band
    (KMAX + 2, None),  # T just above: one key in each far region
    (KMAX + 2, [1, 0, 2]),
    (10, [0, 10, 4]),  # the second sentence is all padding: every row of it empty
])
def test_region_split_matches_dense_reference(mode, T, pads, block):
    B, D = 3, 4
    q, k, v, wk, wv = inputs(B, T, D)
    kpm = key_padding(B, T, pads)
    scale = D ** -0.5
    used = [q, k, v, wk] + ([wv] if mode == "kv" else [])

    def region(q, k, v, wk, wv=None):
        return region_relpos_attention(q, k, v, wk, tables(mode, wk, wv), KMAX, kpm, scale, block)

    def reference(q, k, v, wk, wv=None):
        return shaw64(q, k, v, wk, tables(mode, wk, wv), KMAX, scale, kpm)[0]

    got, got_grads = forward_and_grads(region, used, seed=T)
    ref, ref_grads = forward_and_grads(reference, used, seed=T)
    assert torch.isfinite(got).all() and all(torch.isfinite(d).all() for d in got_grads)
    assert_close(got, ref, **F64)
    for name, a, b in zip(["q", "k", "v", "rel_keys", "rel_values"], got_grads, ref_grads):
        assert_close(a, b, **F64, msg=lambda m: f"grad of {name}: {m}")
    if pads is not None and T in pads:  # a sentence of padding only: zeros, not NaN
        b = pads.index(T)
        assert_close(got[b], torch.zeros_like(got[b]))
        assert_close(got_grads[0][b], torch.zeros_like(got_grads[0][b]))


@pytest.mark.parametrize("block", [1, 3, 4])
def test_far_regions_forward_and_backward_match_a_dense_softmax(block):
    """far_forward / far_backward (torch's CPU flash kernel per query block) against a dense
    float64 masked softmax over the keys left of each block's strip and right of it: output,
    log-sum-exp (-inf where no key), and dS = P (dout . v_j - dout . out) given to q, k, v."""
    B, H, T, D, dist = 2, 2, 11, 4, 2
    q, k, v, _, _ = (t.detach() for t in inputs(B, T, D, H, seed=4))
    kpm = key_padding(B, T, [0, 5])
    scale = 0.37
    g = torch.Generator().manual_seed(5)
    dout, out_given = (torch.randn(2, B, H, T, D, generator=g, dtype=torch.float64) for _ in range(2))
    out, _, lse = far_forward(CPU, q, k, v, kpm, block, dist, scale)
    dq, dk, dv = (torch.zeros_like(t) for t in (q, k, v))
    _, kernel_lse, _ = far_forward(CPU, q, k, v, kpm, block, dist, scale)
    far_backward(CPU, dout, q, k, v, out_given, kernel_lse, kpm, block, dist, scale, dq, dk, dv)

    first = torch.tensor([i // block * block for i in range(T)])[:, None]  # each query's block
    last = (first + block).clamp(max=T)
    j = torch.arange(T)[None, :]
    ref_dq, ref_dk, ref_dv = (torch.zeros_like(t) for t in (q, k, v))
    for side, region in enumerate((j < first - dist, j >= last + dist)):
        allowed = region & ~kpm[:, None, None, :]
        has_key = allowed.any(-1)
        s = torch.where(allowed, q @ k.transpose(-1, -2) * scale, float("-inf"))
        s = torch.where(has_key[..., None], s, 0.0)
        p = torch.softmax(s, -1) * has_key[..., None]
        assert_close(out[side], p @ v, **F64)
        assert_close(lse[side], torch.where(has_key, torch.logsumexp(s, -1), float("-inf")), **F64)
        ds = p * (dout[side] @ v.transpose(-1, -2) - (dout[side] * out_given[side]).sum(-1, keepdim=True))
        ref_dq += ds @ k * scale
        ref_dk += ds.transpose(-1, -2) @ q * scale
        ref_dv += p.transpose(-1, -2) @ dout[side]
    assert torch.isneginf(lse).any() and torch.isfinite(lse).any()  # empty and full rows
    for got, ref in ((dq, ref_dq), (dk, ref_dk), (dv, ref_dv)):
        assert_close(got, ref, **F64)


@pytest.mark.parametrize("mode", ["kv", "k", "tied"])
def test_region_split_layer_equals_explicit_forward_and_backward(mode):
    """Through the core (the positions and masks it gives the path) against the explicit path,
    the threshold and the block lowered by the layer's policy: 3 blocks of 4 of 9 positions,
    each with far keys."""
    policy = backends.Policy(blocked_min_len=4, region_block=4)

    def tables(attn):
        for n, p in attn.named_parameters():
            if "rel_" in n:
                p.normal_(0, 1)

    grads = auto_matches_explicit(make_args("relpos", relpos_mode=mode, relpos_k=2), "region split", init=tables,
                                  policy=policy, blocks=3)
    assert any("rel_keys" in n for n in grads)


@pytest.mark.parametrize("mode", ["kv", "k", "tied"])
def test_auto_on_cpu_takes_the_region_split_for_long_encoder_self_attention(mode):
    attn = make_attention(make_args("relpos", relpos_k=2, relpos_mode=mode), backend="auto")
    n = backends.DEFAULT.blocked_min_len
    long_ = dict(tgt_len=n, src_len=n)
    assert path_name(attn, **long_) == "region split"
    assert path_name(attn, tgt_len=4 * n, src_len=4 * n) == "region split"
    short = path_name(attn, tgt_len=n - 1, src_len=n - 1)
    assert short == ("fused" if mode == "k" else "explicit")
    # the decoder's masked self-attention: the query blocks (kv/tied) or SDPA (k)
    decoder = make_attention(make_args("relpos", relpos_k=2, relpos_mode=mode), side="decoder")
    blocks = "fused" if mode == "k" else "query blocks"
    assert path_name(decoder, attn_mask=True, **long_) == blocks
    assert path_name(decoder, incremental=True, tgt_len=1, src_len=n) != "region split"
    # attention dropout, weights, incremental decoding, CUDA: not this path
    assert path_name(attn, dropout_p=0.1, **long_) == short
    assert path_name(attn, need_weights=True, **long_) == "explicit"
    assert path_name(attn, tgt_len=n, src_len=n + 1) != "region split"
    assert path_name(attn, on_cuda=True, **long_) == ("fused" if mode == "k" else "flex piece")
    forced = make_attention(make_args("relpos", relpos_k=2, relpos_mode=mode), backend="explicit")
    assert path_name(forced, **long_) == "explicit"
    two = make_attention(make_args("relpos,csan1d", relpos_k=2, relpos_mode=mode, csan_window=3,
                                   csan_layers="0"), backend="auto")
    assert path_name(two, **long_) != "region split"
    reasons = backends.reasons(attn._layer, backends.Call(attn_mask=True, dropout_p=0.1, **long_))
    assert any("attn_mask" in r for r in reasons["region split"])
    assert any("attention dropout" in r for r in reasons["region split"])


def test_the_clip_decides_the_region_split_and_the_value_table_the_query_blocks():
    """The paths read the form of the declared terms: a clip opens the far split, a value table
    the query blocks, a bias of the distance alone the distance-bias kernel."""
    kv = backends.DistanceForm(clip=2, keys=True, values=True)
    assert kv.far_split and kv.query_blocks and kv.flex and not kv.bias_kernel
    keys_only = backends.DistanceForm(clip=2, keys=True)
    assert keys_only.far_split and not keys_only.query_blocks and not keys_only.flex
    layer = backends.Layer("auto", distance=backends.DistanceForm(keys=True, values=True))
    n = backends.DEFAULT.blocked_min_len
    call = backends.Call(tgt_len=n, src_len=n)
    assert backends.choose(layer, call).name == "query blocks"  # no clip: no far split
    assert "far_split" in " ".join(backends.reasons(layer, call)["region split"])


def test_the_cuda_entry_gives_the_efficient_kernel_an_aligned_mask():
    """The CUDA entries of the per-device table (prepared, unmeasured on a GPU) always give the
    memory-efficient kernel a bias (its backward takes no None), (B, H, T, S) with rows
    16-aligned as SDPA lays them out, equal to the mask given or zero; the layout checked on
    CPU tensors."""
    from fairseq_attn_core.backends.distance.fused import _cuda_mask

    q, k = torch.zeros(2, 3, 5, 4), torch.zeros(2, 3, 11, 4)
    mask = torch.randn(2, 1, 1, 11)
    for given, want in ((mask, mask.expand(2, 3, 5, 11)), (None, torch.zeros(2, 3, 5, 11))):
        bias = _cuda_mask(q, k, given)
        assert bias.shape == (2, 3, 5, 11) and bias.stride(-2) % 16 == 0 and bias.stride(-1) == 1
        assert_close(bias, want, rtol=0, atol=0)
    assert set(KERNELS) == {"cpu", "cuda"}
