"""CSAN 1D/2D against plainly written float64 loop references."""

import math

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, output64, padded_batch, projections64


def csan_reference(attn, x, kpm, window, area=1, head_edge="cut"):
    """Loop reference: for each (b, h, i) gather the allowed (head, key) slots,
    one softmax over all of them, weighted sum of the matching values."""
    q, k, v = projections64(attn, x)
    B, H, T, D = q.shape
    half, nhalf = window // 2, area // 2
    out = torch.zeros(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                scores, values = [], []
                for o in range(-nhalf, nhalf + 1):
                    hk = h + o
                    if head_edge == "cut" and not 0 <= hk < H:
                        continue
                    hv = min(max(hk, 0), H - 1) if head_edge == "authors" else hk % H
                    hk = hk % H
                    for j in range(T):
                        if kpm[b, j] or abs(i - j) > half:
                            continue
                        scores.append(float(q[b, h, i] @ k[b, hk, j]) / math.sqrt(D))
                        values.append(v[b, hv, j])
                if not scores:  # a query with no allowed key outputs zeros
                    continue
                m = max(scores)
                w = [math.exp(s - m) for s in scores]
                z = sum(w)
                for wi, vj in zip(w, values):
                    out[b, h, i] += wi / z * vj
    return output64(attn, out)


@pytest.mark.parametrize("backend", ["fused", "explicit"])
@pytest.mark.parametrize("window", [1, 3, 5])
@pytest.mark.parametrize("left_pad", [True, False])
def test_csan1d_matches_loop_reference(backend, window, left_pad):
    args = make_args("csan1d", csan_window=window, csan_layers="0")
    attn = make_attention(args, backend=backend).eval()
    x, kpm = padded_batch([7, 4, 2], left_pad=left_pad)
    out, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    ref = csan_reference(attn, x, kpm, window)
    real = ~kpm.t()[..., None]  # compare real tokens; pad queries checked separately
    assert_close(out.double() * real, ref * real, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["fused", "explicit"])
@pytest.mark.parametrize("head_edge", ["cut", "wrap", "authors"])
@pytest.mark.parametrize("area", [1, 3])
def test_csan2d_matches_loop_reference(backend, head_edge, area):
    args = make_args("csan2d", csan_window=3, csan_heads=area, csan_head_edge=head_edge,
                     csan_layers="0")
    attn = make_attention(args, backend=backend).eval()
    x, kpm = padded_batch([6, 3], left_pad=True)
    out, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    ref = csan_reference(attn, x, kpm, 3, area=area, head_edge=head_edge)
    real = ~kpm.t()[..., None]
    assert_close(out.double() * real, ref * real, rtol=1e-5, atol=1e-6)


def test_csan2d_all_heads_area_with_wide_window_is_dense_over_heads():
    """Area = all H heads with wrap and a window covering the sentence: every
    query sees every (head, key) pair -- check against the reference too."""
    args = make_args("csan2d", csan_window=9, csan_heads=3, csan_head_edge="wrap", heads=3,
                     csan_layers="0")
    attn = make_attention(args, embed_dim=12, num_heads=3).eval()
    x, kpm = padded_batch([5, 5], embed_dim=12)
    out, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    assert_close(out.double(), csan_reference(attn, x, kpm, 9, area=3, head_edge="wrap"),
                 rtol=1e-5, atol=1e-6)


def test_edge_modes_differ_only_at_edge_heads():
    """cut/wrap/authors give the same probabilities for interior heads; at the edge
    heads cut differs from wrap, and authors (keys wrap) equals wrap."""
    weights = {}
    x, kpm = padded_batch([5])
    for edge in ("cut", "wrap", "authors"):
        args = make_args("csan2d", csan_window=3, csan_heads=3, csan_head_edge=edge, csan_layers="0")
        attn = make_attention(args, backend="explicit").eval()
        _, w = attn(x, x, x, key_padding_mask=kpm, need_head_weights=True)  # (H, B, T, S)
        weights[edge] = w
    for edge in ("wrap", "authors"):
        assert_close(weights[edge][1:3], weights["cut"][1:3])
    for h in (0, 3):
        assert (weights["cut"][h] - weights["wrap"][h]).abs().max() > 1e-3
    assert_close(weights["wrap"], weights["authors"])


def test_window_inside_padding_gives_zeros_not_nan():
    args = make_args("csan1d", csan_window=3, csan_layers="0")
    for backend in ("fused", "explicit"):
        attn = make_attention(args, backend=backend).eval()
        x, kpm = padded_batch([8, 2], left_pad=True)  # sentence 2: 6 pads then 2 tokens
        x.requires_grad_(True)
        out, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
        assert torch.isfinite(out).all()
        # pad queries far from real tokens see no key: their attention output is zero,
        # so the layer output there is just out_proj's bias
        assert_close(out[0, 1], attn.out_proj.bias)
        out.sum().backward()
        assert torch.isfinite(x.grad).all()


def test_window_covering_sentence_equals_baseline():
    base = make_attention(make_args("")).eval()
    csan = make_attention(make_args("csan1d", csan_window=21, csan_layers="0")).eval()
    csan.load_state_dict(base.state_dict())
    x, kpm = padded_batch([9, 5, 3])
    a, _ = base(x, x, x, key_padding_mask=kpm, need_weights=False)
    b, _ = csan(x, x, x, key_padding_mask=kpm, need_weights=False)
    assert_close(a, b)


def test_csan_only_on_selected_encoder_layers():
    from fairseq_attn_core import AttentionSite, build_pieces

    args = make_args("csan2d", layers=6, csan_layers="0-2")
    names = []
    for side in ("encoder", "decoder"):
        for i in range(6):
            site = AttentionSite(side, i, 6, 4, 4)
            names.append((side, i, [p.name for p in build_pieces(args, site)]))
    active = [(s, i) for s, i, n in names if n == ["csan2d"]]
    assert active == [("encoder", 0), ("encoder", 1), ("encoder", 2)]
