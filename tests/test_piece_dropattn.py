"""DropAttention (c) and (e), Lin et al. 2019: float64 loop reference with the
sampled mask, mask statistics (rate, windows, columns), rescaling modes,
all-dropped rows, eval identity, fused vs explicit, combination with csan2d."""

import math

import pytest
import torch
from fairseq.models import ARCH_MODEL_REGISTRY
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, output64, padded_batch, projections64, real_positions, path_name
from fairseq_attn_core import AttentionContext, AttentionSite, PieceConfigError
from fairseq_attn_core.pieces.dropattn import DropAttentionColumns, DropAttentionElements


def drop_piece(attn):
    (piece,) = [p for p in attn.pieces if p.name.startswith("dropattn")]
    return piece


def record_masks(piece):
    """Make ``piece`` remember every (keep, lost) it samples."""
    seen = []
    orig = piece.sample

    def sample(ctx):
        out = orig(ctx)
        seen.append(out)
        return out

    piece.sample = sample
    return seen


def reference(attn, x, kpm, keep, lost, rescale, p, causal=False, csan=None):
    """Plain float64 loops. ``keep``/``lost`` are the sampled masks (B, H, T, S) / (B, H, T, 1).

    normalized:  softmax over the allowed keys that are kept (a reset row keeps all);
    traditional: softmax over the allowed keys, then * keep / (1 - p) (reset rows unchanged).
    ``csan=(window, heads)``: 2D-CSAN slots (cut at the head edges), the mask of key j
    applying to every slot of j."""
    q, k, v = projections64(attn, x)
    B, H, T, D = q.shape
    out = torch.zeros(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        real = real_positions(kpm[b]) if kpm is not None else list(range(T))
        for h in range(H):
            for i in real:
                if csan is None:
                    slots = [(h, j) for j in real if not (causal and j > i)]
                else:
                    half, n = csan[0] // 2, csan[1]
                    slots = [(h2, j) for h2 in range(h - n // 2, h + n // 2 + 1) if 0 <= h2 < H
                             for j in real if abs(j - i) <= half]
                kept = lambda j: bool(keep[b, h, i, j]) or bool(lost[b, h, i, 0])  # noqa: E731
                scored = slots if rescale == "traditional" else [s for s in slots if kept(s[1])]
                if not scored:
                    continue  # empty row -> zeros
                e = [float(q[b, h, i] @ k[b, h2, j]) / math.sqrt(D) for h2, j in scored]
                m = max(e)
                w = [math.exp(a - m) for a in e]
                for (h2, j), wj in zip(scored, w):
                    alpha = wj / sum(w)
                    if rescale == "traditional":
                        if bool(lost[b, h, i, 0]):
                            pass
                        elif bool(keep[b, h, i, j]):
                            alpha = alpha / (1 - p)
                        else:
                            alpha = 0.0
                    out[b, h, i] += alpha * v[b, h2, j]
    return out


def real_rows(y, kpm):
    return [y[real_positions(kpm[b]), b] for b in range(kpm.size(0))]


@pytest.mark.parametrize("piece", ["dropattn_e", "dropattn_c"])
@pytest.mark.parametrize("rescale", ["normalized", "traditional"])
@pytest.mark.parametrize("left_pad", [True, False])
def test_matches_loop_reference_with_sampled_mask(piece, rescale, left_pad):
    p = 0.4
    args = make_args(piece, dropattn_rate=p, dropattn_window=2, dropattn_rescale=rescale)
    attn = make_attention(args, backend="explicit").train()
    masks = record_masks(drop_piece(attn))
    x, kpm = padded_batch([6, 3, 5], left_pad=left_pad)
    torch.manual_seed(3)
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    (keep, lost), = masks
    assert not keep.all()  # something was dropped
    ref = output64(attn, reference(attn, x, kpm, keep, lost, rescale, p))
    for got, exp in zip(real_rows(y, kpm), real_rows(ref, kpm)):
        assert_close(got.double(), exp, rtol=1e-5, atol=1e-5)


def sample_for(cls, p, w, side="encoder", T=64, S=64, B=4, H=4, kpm=None):
    site = AttentionSite(side=side, layer_idx=0, num_layers=2, num_heads=H, head_dim=4)
    piece = cls(site, p, w)
    ctx = AttentionContext(site=site, bsz=B, tgt_len=T, src_len=S, q_pos=torch.arange(T),
                           k_pos=torch.arange(S), key_padding_mask=kpm, training=True,
                           incremental=False)
    return piece.sample(ctx)


@pytest.mark.parametrize("w", [1, 2, 4])
def test_element_mask_rate_and_windows(w):
    torch.manual_seed(0)
    p = 0.2
    keep, lost = sample_for(DropAttentionElements, p, w, T=64, S=400)
    dropped = ~keep
    # starts with probability p/w expanding over w keys: fraction 1 - (1 - p/w)^w (cut at the end)
    interior = dropped[..., w:]
    expected = 1 - (1 - p / w) ** w
    assert abs(interior.double().mean().item() - expected) < 0.01
    # every run of dropped keys is at least w long, unless it touches the end of the row
    d = dropped.reshape(-1, dropped.size(-1)).int()
    padded = torch.nn.functional.pad(d, (1, 1))
    edges = padded[:, 1:] - padded[:, :-1]
    for row in range(0, d.size(0), 97):
        starts = (edges[row] == 1).nonzero().flatten()
        ends = (edges[row] == -1).nonzero().flatten()
        for s, e in zip(starts.tolist(), ends.tolist()):
            assert e - s >= w or e == d.size(1)
    # elements: different queries get different masks
    assert (dropped[:, :, 0] != dropped[:, :, 1]).any()
    assert not lost.any()


def test_column_mask_drops_whole_columns():
    torch.manual_seed(0)
    keep, lost = sample_for(DropAttentionColumns, 0.2, 2, T=16, S=400, B=8, H=4)
    assert (keep == keep[:, :, :1]).all()  # the same keys for every query of a (sentence, head)
    assert (keep[0, 0] != keep[0, 1]).any() or (keep[0] != keep[1]).any()  # per (sentence, head)
    assert abs((~keep[..., 2:]).double().mean().item() - (1 - 0.9 ** 2)) < 0.02


def test_same_seed_same_mask_different_seed_different():
    args = make_args("dropattn_e", dropattn_rate=0.5)
    attn = make_attention(args).train()
    x, kpm = padded_batch([6, 4])
    outs = []
    for seed in (1, 1, 2):
        torch.manual_seed(seed)
        outs.append(attn(x, x, x, key_padding_mask=kpm, need_weights=False)[0])
    assert_close(outs[0], outs[1], rtol=0, atol=0)
    assert (outs[0] - outs[2]).abs().max() > 1e-4


@pytest.mark.parametrize("piece", ["dropattn_e", "dropattn_c"])
@pytest.mark.parametrize("rescale", ["normalized", "traditional"])
def test_identity_in_eval_and_at_p0(piece, rescale):
    base = make_attention(make_args(""), backend="explicit")
    x, kpm = padded_batch([5, 3])
    y0, w0 = base.eval()(x, x, x, key_padding_mask=kpm)
    for p, train in ((0.5, False), (0.0, True)):
        attn = make_attention(make_args(piece, dropattn_rate=p, dropattn_rescale=rescale),
                              backend="explicit")
        attn.load_state_dict(base.state_dict())
        attn.train(train)
        y1, w1 = attn(x, x, x, key_padding_mask=kpm)
        assert_close(y1, y0)
        assert_close(w1, w0)
    # in training with p > 0 the output does change
    attn.train()
    drop_piece(attn).p = 0.5
    torch.manual_seed(0)
    y2, _ = attn(x, x, x, key_padding_mask=kpm)
    assert (y2 - y0).abs().max() > 1e-3


@pytest.mark.parametrize("piece", ["dropattn_e", "dropattn_c"])
def test_fused_equals_explicit_for_normalized(piece):
    args = make_args(piece, dropattn_rate=0.4)
    fused = make_attention(args, backend="fused").train()
    explicit = make_attention(args, backend="explicit").train()
    explicit.load_state_dict(fused.state_dict())
    assert path_name(fused) == "fused" and path_name(explicit) == "explicit"
    x, kpm = padded_batch([6, 4])
    torch.manual_seed(7)
    yf, _ = fused(x, x, x, key_padding_mask=kpm, need_weights=False)
    torch.manual_seed(7)
    ye, _ = explicit(x, x, x, key_padding_mask=kpm, need_weights=False)
    assert_close(yf, ye, rtol=1e-5, atol=1e-5)
    trad = make_attention(make_args(piece, dropattn_rescale="traditional"), backend="auto")
    assert path_name(trad) == "explicit"


@pytest.mark.parametrize("rescale", ["normalized", "traditional"])
def test_all_dropped_rows_are_left_undropped(rescale):
    """p near 1: most rows lose every key; they fall back to plain attention, no NaN."""
    p = 0.95
    args = make_args("dropattn_e", dropattn_rate=p, dropattn_window=1, dropattn_rescale=rescale)
    attn = make_attention(args, side="decoder", backend="explicit").train()
    masks = record_masks(drop_piece(attn))
    T = 5
    x, _ = padded_batch([T, T])
    causal = torch.triu(torch.full((T, T), float("-inf")), 1)
    torch.manual_seed(0)
    y, w = attn(x, x, x, attn_mask=causal, need_weights=True, need_head_weights=True)
    (keep, lost), = masks
    assert lost.any() and not lost.all()
    assert torch.isfinite(y).all() and torch.isfinite(w).all()
    # a reset row has exactly the undropped causal distribution
    base = make_attention(make_args(""), side="decoder", backend="explicit").eval()
    base.load_state_dict(attn.state_dict())
    _, w0 = base(x, x, x, attn_mask=causal, need_weights=True, need_head_weights=True)
    w, w0 = w.transpose(0, 1), w0.transpose(0, 1)  # (B, H, T, S)
    rows = lost[..., 0]
    assert_close(w[rows], w0[rows])
    ref = output64(attn, reference(attn, x, None, keep, lost, rescale, p, causal=True))
    assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)


def test_combines_with_csan2d_and_relpos():
    p = 0.4
    args = make_args("csan2d,dropattn_e", dropattn_rate=p, csan_layers="0", csan_window=3,
                     csan_heads=3)
    for rescale in ("normalized", "traditional"):
        args.dropattn_rescale = rescale
        attn = make_attention(args, backend="explicit").train()
        masks = record_masks(drop_piece(attn))
        x, kpm = padded_batch([6, 3])
        torch.manual_seed(4)
        y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
        (keep, lost), = masks
        ref = output64(attn, reference(attn, x, kpm, keep, lost, rescale, p, csan=(3, 3)))
        for got, exp in zip(real_rows(y, kpm), real_rows(ref, kpm)):
            assert_close(got.double(), exp, rtol=1e-5, atol=1e-5)
    # with relpos, disan and csan2d together: runs, finite, gradients reach the relpos tables
    args = make_args("csan2d,relpos,dropattn_c,disan", relpos_k=2, csan_layers="0", csan_window=3,
                     disan_layers="0")
    attn = make_attention(args).train()
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    y.sum().backward()
    assert torch.isfinite(y).all()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in attn.pieces.parameters())


def test_flags_validated_and_conflict():
    with pytest.raises(PieceConfigError, match="--dropattn-rate"):
        make_args("dropattn_e", dropattn_rate=1.0)
    with pytest.raises(PieceConfigError, match="--dropattn-rate"):
        make_args("dropattn_c", dropattn_rate=-0.1)
    with pytest.raises(PieceConfigError, match="--dropattn-window"):
        make_args("dropattn_e", dropattn_window=0)
    with pytest.raises(PieceConfigError, match="--dropattn-rescale"):
        make_args("dropattn_e", dropattn_rescale="none")
    with pytest.raises(PieceConfigError, match="--dropattn-sides"):
        make_args("dropattn_e", dropattn_sides="cross")
    with pytest.raises(PieceConfigError, match="--dropattn-layers"):
        make_args("dropattn_e", dropattn_layers="2")
    with pytest.raises(PieceConfigError, match="explicit path"):
        make_args("dropattn_e", dropattn_rescale="traditional", attn_backend="fused")
    with pytest.raises(PieceConfigError, match="dropattn_c and dropattn_e conflict|dropattn_e and dropattn_c conflict"):
        make_args("dropattn_c,dropattn_e")


def test_defaults_and_architectures():
    args = make_args("dropattn_e")
    assert (args.dropattn_rate, args.dropattn_window, args.dropattn_rescale) == (0.2, 2, "normalized")
    assert (args.dropattn_sides, args.dropattn_layers) == ("encoder,decoder", "all")
    assert len(make_attention(args, side="decoder", layer_idx=1).pieces) == 1
    for name in ("dropattn_e", "dropattn_c"):
        assert f"transformer_{name}_wmt_en_de" in ARCH_MODEL_REGISTRY
        assert f"transformer_{name}_vaswani_wmt_en_de_big" in ARCH_MODEL_REGISTRY
