"""Block-local fused attention (fairseq_attn_core/backends/local.py) used for long 1D- and 2D-CSAN
sequences: same outputs and gradients as the dense fused path, the explicit path and plain loops."""

import math

import pytest
import torch
import torch.nn.functional as F

from attn_helpers import make_args, make_attention, output64, padded_batch, path_name, projections64
from fairseq_attn_core import backends
from fairseq_attn_core.backends import local

#: thresholds and block lowered for CPU tests: several query blocks of 8 rows
SMALL = backends.Policy(local_min_len=16, local_block=8)


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


def test_core_uses_local_path_with_identical_results():
    """csan1d layer, long enough for the local path (threshold and block lowered by the
    layer's policy: 5 blocks of 8 rows for 40 positions)."""
    args = make_args("csan1d", layers=3, csan_window=5)
    lengths = [40, 33, 7, 1]
    x, kpm = padded_batch(lengths, embed_dim=16)
    x = x.double()

    attn = make_attention(args, embed_dim=16, num_heads=4, backend="fused", dtype=torch.float64)
    assert attn.pieces[0].band_half == 2
    dense = _run(attn, x, kpm)

    assert attn.last_run == ("fused", None)
    attn.policy = SMALL
    attn.zero_grad()
    blocked = _run(attn, x, kpm)
    assert attn.last_run == ("block-local", 5)
    explicit_attn = make_attention(args, embed_dim=16, num_heads=4, backend="explicit",
                                   dtype=torch.float64)
    explicit = _run(explicit_attn, x, kpm)
    # the explicit path takes its softmax in float32: compare with float32 tolerances
    for (got, want), tol in (((blocked, dense), {}), ((blocked, explicit), dict(rtol=1e-5, atol=1e-6))):
        torch.testing.assert_close(got[0], want[0], **tol)
        torch.testing.assert_close(got[1], want[1], **tol)
        for name in want[2]:
            torch.testing.assert_close(got[2][name], want[2][name], msg=name, **tol)


def test_local_path_not_used_for_short():
    args1d = make_args("csan1d", layers=3, csan_window=5)
    attn1d = make_attention(args1d, embed_dim=16, num_heads=4, backend="fused", policy=SMALL)
    assert path_name(attn1d, tgt_len=40, src_len=40) == "block-local"
    assert path_name(attn1d, tgt_len=10, src_len=10) == "fused"  # short
    assert path_name(attn1d, tgt_len=1, src_len=40, incremental=True) == "fused"  # incremental decoding
    base = make_attention(make_args(""), embed_dim=16, num_heads=4, policy=SMALL)
    assert path_name(base, tgt_len=400, src_len=400) == "fused"  # no band


def naive_slot_attention(q, k, v, mask, half, scale, slots):
    """Plain loops, float64: query i of head h over the keys j of every slot s (k[:, :, s*T + j])
    within ``half`` of i and allowed by ``mask`` (B|1, H|1, T, slots*T) bool or additive float."""
    B, H, T, D = q.shape
    out = torch.zeros(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            m = mask[min(b, mask.size(0) - 1), min(h, mask.size(1) - 1)]
            for i in range(T):
                scores, values = [], []
                for s in range(slots):
                    for j in range(max(0, i - half), min(T, i + half + 1)):
                        add = m[i, s * T + j]
                        if add.dtype == torch.bool and not add or float(add) == float("-inf"):
                            continue
                        bias = 0.0 if add.dtype == torch.bool else float(add)
                        scores.append(float(q[b, h, i] @ k[b, h, s * T + j]) * scale + bias)
                        values.append(v[b, h, s * T + j])
                if scores:
                    p = torch.softmax(torch.tensor(scores, dtype=torch.float64), 0)
                    out[b, h, i] = sum(pn * vn for pn, vn in zip(p, values))
    return out


@pytest.mark.parametrize("T,block,half,per_head", [(19, 8, 2, True), (16, 8, 1, False), (9, 32, 3, True)])
def test_local_sdpa_over_slots_matches_naive_loops(T, block, half, per_head):
    """Widened keys (3 slots side by side): bool and additive masks, one mask per head or shared,
    slots off the head edge, padding; T a multiple of the block or not."""
    g = torch.Generator().manual_seed(T)
    B, H, D, n = 2, 3, 4, 3
    q = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, H, n * T, D, generator=g, dtype=torch.float64) for _ in range(2))
    pos = torch.arange(T)
    allowed = ((pos[:, None] - pos[None, :]).abs() <= half).repeat(1, n)[None, None]  # (1, 1, T, nT)
    kpm = torch.zeros(B, T, dtype=torch.bool)
    kpm[1, : T // 2] = True
    allowed = allowed & ~kpm.repeat(1, n)[:, None, None, :]
    if per_head:  # head 0 has no slot 0, head H-1 no slot n-1 (2D-CSAN's cut edge)
        slot_ok = torch.ones(H, n, dtype=torch.bool)
        slot_ok[0, 0] = slot_ok[H - 1, n - 1] = False
        allowed = allowed & slot_ok.repeat_interleave(T, dim=1)[None, :, None, :]
    empty = ~allowed.any(-1, keepdim=True)
    got = local.local_sdpa(q, k, v, allowed | empty, half, 0.5, block=block, slots=n).masked_fill(empty, 0.0)
    torch.testing.assert_close(got, naive_slot_attention(q, k, v, allowed, half, 0.5, n))
    bias = torch.randn(1, H if per_head else 1, T, n * T, generator=g, dtype=torch.float64)
    fmask = bias.masked_fill(~allowed, float("-inf"))
    got = local.local_sdpa(q, k, v, fmask.masked_fill(empty, 0.0), half, 0.5, block=block, slots=n)
    torch.testing.assert_close(got.masked_fill(empty, 0.0), naive_slot_attention(q, k, v, fmask, half, 0.5, n))


def csan2d_reference(attn, x, kpm, window, area, head_edge):
    """2D-CSAN written plainly in float64: for each (b, h, i), the keys of the area's heads
    (cut: only heads 0..H-1; wrap: circular; authors: keys wrap, values clamp) within the
    window and not padding, one softmax over all of them. Differentiable in x."""
    q, k, v = projections64(attn, x)
    B, H, T, D = q.shape
    half = window // 2
    rows = []
    for b in range(B):
        for h in range(H):
            for i in range(T):
                scores, values = [], []
                for o in range(-(area // 2), area // 2 + 1):
                    hk = h + o
                    if head_edge == "cut" and not 0 <= hk < H:
                        continue
                    hv = min(max(hk, 0), H - 1) if head_edge == "authors" else hk % H
                    for j in range(max(0, i - half), min(T, i + half + 1)):
                        if not kpm[b, j]:
                            scores.append(q[b, h, i] @ k[b, hk % H, j] / math.sqrt(D))
                            values.append(v[b, hv, j])
                if not scores:  # a query the window leaves without keys outputs zeros
                    rows.append(torch.zeros(D, dtype=torch.float64))
                    continue
                p = torch.softmax(torch.stack(scores), 0)
                rows.append((p[:, None] * torch.stack(values)).sum(0))
    return output64(attn, torch.stack(rows).view(B, H, T, D))


@pytest.mark.parametrize("head_edge", ["cut", "wrap", "authors"])
@pytest.mark.parametrize("left_pad", [True, False])
def test_csan2d_on_block_local_path_matches_loop_reference(head_edge, left_pad):
    """csan2d on the block-local path (thresholds lowered): output and input gradients equal
    a float64 loop over the area's heads and the window, every position (padding ones too),
    with rows a window in padding empties and T not a multiple of the block (3 blocks of 8)."""
    args = make_args("csan2d", csan_window=5, csan_heads=3, csan_head_edge=head_edge, csan_layers="0")
    attn = make_attention(args, embed_dim=16, num_heads=4, backend="auto", dtype=torch.float64,
                          policy=SMALL).train()
    assert path_name(attn, tgt_len=21, src_len=21) == "block-local"
    x, kpm = padded_batch([21, 17, 2], embed_dim=16, left_pad=left_pad, dtype=torch.float64)
    xl = x.clone().requires_grad_()
    out, _ = attn(xl, xl, xl, key_padding_mask=kpm, need_weights=False)
    out.square().sum().backward()
    assert attn.last_run == ("block-local", 3)
    xr = x.clone().requires_grad_()
    ref = csan2d_reference(attn, xr, kpm, 5, 3, head_edge)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(xl.grad, xr.grad)


def test_auto_takes_block_local_for_csan2d_where_csan1d_does():
    """From the policy's local_min_len positions on CPU, under auto and fused, as csan1d; CUDA
    inference keeps flex block-sparse attention from flex_band_min_len, CUDA training the SDPA
    paths."""
    n = backends.DEFAULT.local_min_len
    assert n == 256
    for piece in ("csan1d", "csan2d"):
        for backend in ("auto", "fused"):
            attn = make_attention(make_args(piece, csan_layers="0"), embed_dim=16, num_heads=4, backend=backend)
            assert path_name(attn, tgt_len=n, src_len=n) == "block-local", (piece, backend)
            assert path_name(attn, tgt_len=n - 1, src_len=n - 1) == "fused", (piece, backend)
        attn = make_attention(make_args(piece, csan_layers="0"), embed_dim=16, num_heads=4, backend="auto")
        m = backends.DEFAULT.flex_band_min_len
        assert path_name(attn, tgt_len=m, src_len=m, on_cuda=True) == "flex band", piece
        assert path_name(attn, tgt_len=m - 1, src_len=m - 1, on_cuda=True) == "block-local", piece
        assert path_name(attn, tgt_len=m, src_len=m, on_cuda=True, backward=True) == "block-local", piece


def test_csan2d_block_local_recomputation_replays_attention_dropout(monkeypatch):
    """The widened layer's attention is recomputed in the backward: with attention dropout,
    the gradients are those of the dropout mask the forward drew (the same as without
    recomputation), not of a new one."""
    from fairseq_attn_core.backends.base import HookPath

    args = make_args("csan2d", csan_window=5, csan_layers="0")
    attn = make_attention(args, embed_dim=16, num_heads=4, backend="fused", dropout=0.3,
                          dtype=torch.float64, policy=SMALL).train()
    x, kpm = padded_batch([21, 13], embed_dim=16, dtype=torch.float64)
    res = []
    for recompute in (True, False):
        if not recompute:
            monkeypatch.setattr(local.BlockLocal, "apply", HookPath.apply)
        torch.manual_seed(5)
        out, grad = _run(attn, x, kpm)[:2]
        res.append((out, grad))
    torch.testing.assert_close(res[0][0], res[1][0])
    torch.testing.assert_close(res[0][1], res[1][1])
    torch.manual_seed(6)  # another mask gives other gradients: the check can fail
    assert not torch.allclose(_run(attn, x, kpm)[1], res[1][1])


def test_csan2d_with_a_learned_bias_on_block_local_path_equals_dense():
    """Another piece's bias (t5bias's learned table) repeated per slot: output and the
    gradients of the input and of every parameter (the table's too) equal the dense fused
    path, and the explicit path within its float32 softmax."""
    flags = dict(csan_window=5, csan_layers="0", t5_layers="0", t5_buckets=8, t5_max_distance=6)
    args = make_args("csan2d,t5bias", **flags)
    attn = make_attention(args, backend="fused", dtype=torch.float64).train()
    explicit_attn = make_attention(args, backend="explicit", dtype=torch.float64).train()
    explicit_attn.load_state_dict(attn.state_dict())
    x, kpm = padded_batch([21, 12], embed_dim=16, dtype=torch.float64)
    assert path_name(attn, tgt_len=21, src_len=21) == "fused"
    dense, explicit = _run(attn, x, kpm), _run(explicit_attn, x, kpm)
    attn.policy = SMALL
    assert path_name(attn, tgt_len=21, src_len=21) == "block-local"
    attn.zero_grad()
    got = _run(attn, x, kpm)
    assert attn.last_run == ("block-local", 3)
    assert dense[2]["pieces.1.bucket_bias"].abs().sum() > 0
    for want, tol in ((dense, {}), (explicit, dict(rtol=1e-5, atol=1e-6))):
        torch.testing.assert_close(got[0], want[0], **tol)
        torch.testing.assert_close(got[1], want[1], **tol)
        for name in want[2]:
            torch.testing.assert_close(got[2][name], want[2][name], msg=name, **tol)
