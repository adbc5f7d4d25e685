"""relpos kv/tied on the CPU query-block path (pieces/relpos.py ``blocked_relpos_attention``).

The path computes Shaw et al.'s keys and values a block of query rows at a time, each block's
probabilities recomputed in the backward from the log-sum-exp (a hand-written backward), with the value term from the probability mass per clipped
distance. Checked against a float64 plain loop of the paper's formula, against the explicit
path (forward and gradients, whole layer), and the chooser's choice of it.
"""

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, padded_batch, path_name
from fairseq_attn_core import backends
from fairseq_attn_core.pieces.relpos import RelativePositions, blocked_relpos_attention

TOL = dict(rtol=1e-5, atol=1e-5)


def loop_reference(q, k, v, wk, wv, kmax, start, kpm, attn_mask, scale):
    """Shaw et al. (2018), eq. 3-4, one query at a time, float64."""
    B, H, T, D = q.shape
    S = k.size(2)
    out = torch.zeros(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                e, keys = [], []
                for j in range(S):
                    if kpm is not None and kpm[b, j]:
                        continue
                    if attn_mask is not None and attn_mask[i, j] == float("-inf"):
                        continue
                    d = max(-kmax, min(kmax, j - (start + i))) + kmax
                    e.append(float(q[b, h, i] @ (k[b, h, j] + wk[d])) * scale
                             + (float(attn_mask[i, j]) if attn_mask is not None else 0.0))
                    keys.append((j, d))
                p = torch.softmax(torch.tensor(e, dtype=torch.float64), 0)
                for pj, (j, d) in zip(p, keys):
                    out[b, h, i] += pj * (v[b, h, j] + wv[d])
    return out


@pytest.mark.parametrize("T,S,start,kmax,block,causal", [
    (7, 7, 0, 2, 3, False), (9, 9, 0, 3, 4, True), (1, 6, 5, 2, 128, False), (10, 10, 0, 20, 4, False)])
def test_query_blocks_match_the_loop(T, S, start, kmax, block, causal):
    g = torch.Generator().manual_seed(T * 10 + S)
    B, H, D = 2, 2, 4
    q, k, v = (torch.randn(B, H, n, D, generator=g, dtype=torch.float64) for n in (T, S, S))
    wk, wv = (torch.randn(2 * kmax + 1, D, generator=g, dtype=torch.float64) for _ in range(2))
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[1, :2] = True  # left padding of the second sentence
    attn_mask = None
    if causal:
        attn_mask = torch.triu(torch.full((T, S), float("-inf"), dtype=torch.float64), 1)
    got = blocked_relpos_attention(q, k, v, wk, wv, kmax, start + torch.arange(T), torch.arange(S),
                                   kpm, attn_mask, D ** -0.5, block=block)
    ref = loop_reference(q, k, v, wk, wv, kmax, start, kpm, attn_mask, D ** -0.5)
    rows = ~kpm[:, start:start + T] if T == S else torch.ones(B, T, dtype=torch.bool)
    assert_close(got[rows[:, None, :].expand(B, H, T)], ref[rows[:, None, :].expand(B, H, T)],
                 rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", ["kv", "tied"])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_query_blocks_equal_explicit_forward_and_backward(monkeypatch, mode, side):
    monkeypatch.setattr(backends, "BLOCKED_MIN_LEN", 4)
    if side == "encoder":  # auto takes the region split there (test_relpos_regions.py)
        monkeypatch.setattr(RelativePositions, "region_path_ok", False)
    monkeypatch.setattr("fairseq_attn_core.pieces.relpos.CPU_BLOCK", 3)
    args = make_args("relpos", relpos_mode=mode, relpos_k=2)
    runs = []
    for backend in ("auto", "explicit"):
        attn = make_attention(args, side=side, backend=backend, dtype=torch.float64)
        with torch.no_grad():
            for n, p in attn.named_parameters():
                if "rel_" in n:
                    p.normal_(0, 1)
        # the decoder's future mask: the region split skips it (it would ignore the mask)
        assert (path_name(attn, tgt_len=8, src_len=8, attn_mask=side == "decoder")
                == ("query blocks" if backend == "auto" else "explicit"))
        # decoders pad on the right (a left-padded causal row would have no key at all)
        x, kpm = padded_batch([8, 5, 6], left_pad=side == "encoder", dtype=torch.float64)
        x.requires_grad_(True)
        mask = torch.triu(torch.full((8, 8), float("-inf"), dtype=torch.float64), 1) if side == "decoder" else None
        y, _ = attn(x, x, x, key_padding_mask=kpm, attn_mask=mask, need_weights=False)
        y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=y.dtype))
        runs.append((y.detach(), x.grad, {n: p.grad for n, p in attn.named_parameters()}))
    (ya, xa, ga), (yb, xb, gb) = runs
    # the explicit path's softmax is float32 even for float64 inputs: agreement to ~1e-6
    # (the query-block algebra itself is checked to float64 precision against the loop above)
    assert_close(ya, yb, **TOL)
    assert_close(xa, xb, **TOL)
    assert any("rel_keys" in n for n in ga)
    for n in ga:
        assert_close(ga[n], gb[n], **TOL)


def test_chooser_takes_query_blocks_for_long_cpu_relpos_kv_only():
    """Decoder self-attention (fairseq's future mask): the region split declines it."""
    kv = make_attention(make_args("relpos", relpos_k=2), side="decoder", backend="auto")
    long_ = dict(tgt_len=backends.BLOCKED_MIN_LEN, src_len=backends.BLOCKED_MIN_LEN, attn_mask=True)
    assert path_name(kv, **long_) == "query blocks"
    assert path_name(kv, tgt_len=backends.BLOCKED_MIN_LEN - 1, src_len=backends.BLOCKED_MIN_LEN - 1) == "explicit"
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
    out = blocked_relpos_attention(q, k, v, wk, wv, kmax, torch.arange(T), torch.arange(T), kpm, None,
                                   D ** -0.5, block=4)
    assert_close(out[1], torch.zeros(H, T, D, dtype=torch.float64))
    ref = loop_reference(q.detach()[:1], k[:1], v[:1], wk, wv, kmax, 0, kpm[:1], None, D ** -0.5)
    assert_close(out[0], ref[0], rtol=1e-10, atol=1e-10)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()
    assert_close(q.grad[1], torch.zeros(H, T, D, dtype=torch.float64))
