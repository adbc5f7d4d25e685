"""Block-local fused attention (attention/backends/local.py) used for long 1D-CSAN sequences:
same outputs and gradients as the dense fused path and the explicit path."""

import pytest
import torch
import torch.nn.functional as F

from attn_helpers import make_args, make_attention, padded_batch, path_name
from fairseq_attn_plugins.attention.backends import local


def naive_window_attention(q, k, v, kpm, half, scale):
    """Plain loops, float64: softmax over the keys of the window that are not padding."""
    B, H, T, D = q.shape
    out = torch.zeros(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = [j for j in range(max(0, i - half), min(T, i + half + 1)) if not kpm[b, j]]
                if not keys:
                    continue  # the core outputs zeros for such a query
                s = torch.stack([q[b, h, i].double() @ k[b, h, j].double() * scale for j in keys])
                p = torch.softmax(s, 0)
                out[b, h, i] = sum(p[n] * v[b, h, j].double() for n, j in enumerate(keys))
    return out


@pytest.mark.parametrize("T,block,half", [(41, 8, 3), (37, 16, 5), (20, 64, 2)])
def test_local_sdpa_matches_naive_window(T, block, half):
    g = torch.Generator().manual_seed(T)
    B, H, D = 3, 2, 4
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[1, : T // 3] = True
    kpm[2, : T - 2] = True  # a long run of padding: some windows hold no key at all
    pos = torch.arange(T)
    allowed = ((pos[:, None] - pos[None, :]).abs() <= half)[None, None] & ~kpm[:, None, None, :]
    empty = ~allowed.any(-1, keepdim=True)
    got = local.local_sdpa(q, k, v, allowed | empty, half, 0.5, block=block).masked_fill(empty, 0.0)
    want = naive_window_attention(q, k, v, kpm, half, 0.5)
    torch.testing.assert_close(got, want)
    # an additive float mask (bias + -inf) gives the dense result too (rows without
    # any key are zeroed by the core, so they are left out of the comparison)
    bias = torch.randn(1, H, T, T, generator=g, dtype=torch.float64)
    fmask = bias.masked_fill(~(allowed | empty), float("-inf"))
    got = local.local_sdpa(q, k, v, fmask, half, 0.5, block=block).masked_fill(empty, 0.0)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=fmask, scale=0.5).masked_fill(empty, 0.0)
    torch.testing.assert_close(got, want)


def _run(attn, x, kpm):
    x = x.clone().requires_grad_()
    out, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    real = (~kpm).t()[:, :, None]
    (out * real).square().sum().backward()
    grads = {n: p.grad.clone() for n, p in attn.named_parameters()}
    return out * real, x.grad * real, grads


def test_core_uses_local_path_with_identical_results(monkeypatch):
    """csan1d layer, long enough for the local path (threshold lowered for a CPU test)."""
    args = make_args("csan1d", layers=3, csan_window=5)
    lengths = [40, 33, 7, 1]
    x, kpm = padded_batch(lengths, embed_dim=16)
    x = x.double()

    attn = make_attention(args, embed_dim=16, num_heads=4, backend="fused", dtype=torch.float64)
    assert attn.pieces[0].band_half == 2
    dense = _run(attn, x, kpm)

    calls = []
    real_local = local.local_sdpa

    def spy(*a, **kw):
        calls.append(a[0].shape)
        return real_local(*a, **kw)

    monkeypatch.setattr(local, "LOCAL_MIN_LEN", 16)
    monkeypatch.setattr(local, "BLOCK", 8)
    monkeypatch.setattr(local, "local_sdpa", spy)
    attn.zero_grad()
    blocked = _run(attn, x, kpm)
    assert calls, "the block-local path was not taken"
    explicit_attn = make_attention(args, embed_dim=16, num_heads=4, backend="explicit",
                                   dtype=torch.float64)
    explicit = _run(explicit_attn, x, kpm)
    # the explicit path takes its softmax in float32: compare with float32 tolerances
    for (got, want), tol in (((blocked, dense), {}), ((blocked, explicit), dict(rtol=1e-5, atol=1e-6))):
        torch.testing.assert_close(got[0], want[0], **tol)
        torch.testing.assert_close(got[1], want[1], **tol)
        for name in want[2]:
            torch.testing.assert_close(got[2][name], want[2][name], msg=name, **tol)


def test_local_path_not_used_for_short(monkeypatch):
    monkeypatch.setattr(local, "LOCAL_MIN_LEN", 16)
    args1d = make_args("csan1d", layers=3, csan_window=5)
    attn1d = make_attention(args1d, embed_dim=16, num_heads=4, backend="fused")
    assert path_name(attn1d, tgt_len=40, src_len=40) == "block-local"
    assert path_name(attn1d, tgt_len=10, src_len=10) == "fused"  # short
    assert path_name(attn1d, tgt_len=1, src_len=40, incremental=True) == "fused"  # incremental decoding
    base = make_attention(make_args(""), embed_dim=16, num_heads=4)
    assert path_name(base, tgt_len=400, src_len=400) == "fused"  # no band
