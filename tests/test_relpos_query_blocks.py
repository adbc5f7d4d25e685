"""relpos kv/tied on the CPU query-block path (fairseq_attn_core/backends/distance/modes.py, mode ``blocks``).

The path computes Shaw et al.'s keys and values a block of query rows at a time, each block's
probabilities recomputed in the backward from the log-sum-exp (a hand-written backward), with
the value term from the probability mass per clipped distance. Checked against the float64
Shaw reference (distance_refs.py: output and the gradients of q, k, v and both tables),
against the explicit path (forward and gradients, whole layer, the number of query blocks it
ran), and the chooser's choice of it.
"""

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, padded_batch, path_name
from distance_refs import shaw64
from fairseq_attn_core import backends
from fairseq_attn_core.backends.distance import DistanceTerms, distance_attention

TOL = dict(rtol=1e-5, atol=1e-5)
F64 = dict(rtol=1e-10, atol=1e-10)


def blocked(q, k, v, wk, wv, kmax, kpm, attn_mask, scale, block):
    return distance_attention(DistanceTerms(key_table=wk, value_table=wv, clip=kmax), q, k, v, scale,
                              "blocks", block, kpm, attn_mask)


@pytest.mark.parametrize("T,S,start,kmax,block,causal", [
    (7, 7, 0, 2, 3, False), (9, 9, 0, 3, 4, True), (1, 6, 5, 2, 128, False), (10, 10, 0, 20, 4, False)])
def test_query_blocks_match_the_reference(T, S, start, kmax, block, causal):
    g = torch.Generator().manual_seed(T * 10 + S)
    B, H, D = 2, 2, 4
    q, k, v = (torch.randn(B, H, n, D, generator=g, dtype=torch.float64) for n in (T, S, S))
    wk, wv = (torch.randn(2 * kmax + 1, D, generator=g, dtype=torch.float64) for _ in range(2))
    tensors = [t.requires_grad_(True) for t in (q, k, v, wk, wv)]
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[1, :2] = True  # left padding of the second sentence
    attn_mask = None
    if causal:
        attn_mask = torch.triu(torch.full((T, S), float("-inf"), dtype=torch.float64), 1)
    got, blocks = blocked(q, k, v, wk, wv, kmax, kpm, attn_mask, D ** -0.5, block)
    assert blocks == -(-T // block)
    ref, _ = shaw64(q, k, v, wk, wv, kmax, D ** -0.5, kpm, start, attn_mask=attn_mask)
    assert_close(got, ref, **F64)
    dout = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    for name, a, b in zip(["q", "k", "v", "rel_keys", "rel_values"], torch.autograd.grad(got, tensors, dout),
                          torch.autograd.grad(ref, tensors, dout)):
        assert_close(a, b, **F64, msg=lambda m: f"grad of {name}: {m}")


@pytest.mark.parametrize("mode", ["kv", "tied"])
def test_query_blocks_equal_explicit_forward_and_backward(mode):
    """The decoder's masked self-attention through the core, threshold and block lowered by the
    layer's policy: 3 blocks of 3 rows of 8 positions (the encoder takes the region split)."""
    policy = backends.Policy(blocked_min_len=4, query_block=3)
    args = make_args("relpos", relpos_mode=mode, relpos_k=2)
    runs = []
    for backend in ("auto", "explicit"):
        attn = make_attention(args, side="decoder", backend=backend, dtype=torch.float64, policy=policy)
        with torch.no_grad():
            for n, p in attn.named_parameters():
                if "rel_" in n:
                    p.normal_(0, 1)
        # the decoder's future mask: the region split skips it (it would ignore the mask)
        assert (path_name(attn, tgt_len=8, src_len=8, attn_mask=True)
                == ("query blocks" if backend == "auto" else "explicit"))
        # decoders pad on the right (a left-padded causal row would have no key at all)
        x, kpm = padded_batch([8, 5, 6], left_pad=False, dtype=torch.float64)
        x.requires_grad_(True)
        mask = torch.triu(torch.full((8, 8), float("-inf"), dtype=torch.float64), 1)
        y, _ = attn(x, x, x, key_padding_mask=kpm, attn_mask=mask, need_weights=False)
        assert attn.last_run == (("query blocks", 3) if backend == "auto" else ("explicit", None))
        y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=y.dtype))
        runs.append((y.detach(), x.grad, {n: p.grad for n, p in attn.named_parameters()}))
    (ya, xa, ga), (yb, xb, gb) = runs
    # the explicit path's softmax is float32 even for float64 inputs: agreement to ~1e-6
    # (the query-block algebra itself is checked to float64 precision against the reference above)
    assert_close(ya, yb, **TOL)
    assert_close(xa, xb, **TOL)
    assert any("rel_keys" in n for n in ga)
    for n in ga:
        assert_close(ga[n], gb[n], **TOL)


def test_chooser_takes_query_blocks_for_long_cpu_relpos_kv_only():
    """Decoder self-attention (fairseq's future mask): the region split declines it."""
    kv = make_attention(make_args("relpos", relpos_k=2), side="decoder", backend="auto")
    n = backends.DEFAULT.blocked_min_len
    long_ = dict(tgt_len=n, src_len=n, attn_mask=True)
    assert path_name(kv, **long_) == "query blocks"
    assert path_name(kv, tgt_len=n - 1, src_len=n - 1) == "explicit"
    assert path_name(kv, on_cuda=True, **long_) == "flex piece"
    assert path_name(kv, need_weights=True, **long_) == "explicit"
    assert path_name(kv, dropout_p=0.1, **long_) == "explicit"  # no dropout in the blocks
    assert path_name(make_attention(make_args("relpos", relpos_k=2), backend="explicit"), **long_) == "explicit"
    k_only = make_attention(make_args("relpos", relpos_k=2, relpos_mode="k"), side="decoder", backend="auto")
    assert path_name(k_only, **long_) == "fused"
    two = make_attention(make_args("relpos,csan1d", relpos_k=2, csan_window=3, csan_layers="0"), backend="auto")
    assert path_name(two, **long_) != "query blocks"


def test_rows_a_mask_empties_give_zero_output_and_gradients():
    """Every key of the second sentence is padding: its rows are empty, and the path gives them zero
    output and zero gradients (the core's convention), as a plain loop over no keys would."""
    g = torch.Generator().manual_seed(3)
    B, H, T, D, kmax = 2, 2, 6, 4, 3
    q = torch.randn(B, H, T, D, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(2))
    wk, wv = (torch.randn(2 * kmax + 1, D, generator=g, dtype=torch.float64) for _ in range(2))
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[1, :] = True
    out, _ = blocked(q, k, v, wk, wv, kmax, kpm, None, D ** -0.5, 4)
    assert_close(out[1], torch.zeros(H, T, D, dtype=torch.float64))
    ref, _ = shaw64(q.detach(), k, v, wk, wv, kmax, D ** -0.5, kpm)
    assert_close(out, ref, **F64)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()
    assert_close(q.grad[1], torch.zeros(H, T, D, dtype=torch.float64))
