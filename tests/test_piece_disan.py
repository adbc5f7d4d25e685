"""disan (Shen et al. 2018; Bi_Direct heads): float64 loop reference, padding,
neutral heads, fused vs explicit, empty rows, decoder incremental decoding,
combination with csan2d, flag validation."""

import math

import pytest
import torch
from fairseq.models import ARCH_MODEL_REGISTRY
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, output64, padded_batch, projections64, real_positions
from fairseq_attn_core import PieceConfigError
from fairseq_attn_core.pieces.disan import parse_directions


def allowed(direction, i, j, keep_diag):
    if direction == "fw":
        return j < i or (keep_diag and j == i)
    if direction == "bw":
        return j > i or (keep_diag and j == i)
    if direction == "nodiag":
        return j != i
    return True


def reference(attn, x, kpm, directions, keep_diag, causal=False, csan=None):
    """Plain float64 loops; a query without allowed keys outputs zeros.
    ``csan=(window, heads)``: 2D-CSAN slots (cut at the head edges), the query head's
    direction applying to every slot."""
    q, k, v = projections64(attn, x)
    B, H, T, D = q.shape
    out = torch.zeros(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        real = real_positions(kpm[b]) if kpm is not None else list(range(T))
        for h in range(H):
            heads = [h]
            if csan is not None:
                heads = [h2 for h2 in range(h - csan[1] // 2, h + csan[1] // 2 + 1) if 0 <= h2 < H]
            for i in real:
                slots = [(h2, j) for h2 in heads for j in real
                         if allowed(directions[h], i, j, keep_diag) and not (causal and j > i)
                         and (csan is None or abs(j - i) <= csan[0] // 2)]
                if not slots:
                    continue
                e = [float(q[b, h, i] @ k[b, h2, j]) / math.sqrt(D) for h2, j in slots]
                m = max(e)
                w = [math.exp(a - m) for a in e]
                for (h2, j), wj in zip(slots, w):
                    out[b, h, i] += wj / sum(w) * v[b, h2, j]
    return out


def real_rows(y, kpm):
    return [y[real_positions(kpm[b]), b] for b in range(kpm.size(0))]


CASES = [
    ("bi", "disable", ["fw", "fw", "bw", "bw"]),
    ("bi", "keep", ["fw", "fw", "bw", "bw"]),
    ("fw:1,bw:1,nodiag:1,all:1", "disable", ["fw", "bw", "nodiag", "all"]),
    ("bw,fw,bw,nodiag", "keep", ["bw", "fw", "bw", "nodiag"]),
]


@pytest.mark.parametrize("spec,diagonal,directions", CASES)
@pytest.mark.parametrize("backend", ["explicit", "fused"])
@pytest.mark.parametrize("left_pad", [True, False])
def test_matches_loop_reference(spec, diagonal, directions, backend, left_pad):
    args = make_args("disan", disan_layers="0", disan_directions=spec, disan_diagonal=diagonal)
    attn = make_attention(args, backend=backend).eval()
    x, kpm = padded_batch([6, 1, 4], left_pad=left_pad)
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    assert torch.isfinite(y).all()
    ref = output64(attn, reference(attn, x, kpm, directions, diagonal == "keep"))
    for got, exp in zip(real_rows(y, kpm), real_rows(ref, kpm)):
        assert_close(got.double(), exp, rtol=1e-5, atol=1e-5)


def test_weights_and_empty_rows():
    """Head 0 (forward, diagonal disabled): first token has no key -> zero weights and
    zero head output; head 2 (backward): the last token."""
    args = make_args("disan", disan_layers="0")
    attn = make_attention(args, backend="explicit").eval()
    x, kpm = padded_batch([4, 3], left_pad=True)
    _, w = attn(x, x, x, key_padding_mask=kpm, need_weights=True, need_head_weights=True)
    w = w.transpose(0, 1)  # (B, H, T, S)
    assert torch.isfinite(w).all()
    for b in range(2):
        r = real_positions(kpm[b])
        first, last = r[0], r[-1]
        assert w[b, 0, first].abs().sum() == 0 and w[b, 2, last].abs().sum() == 0
        for i in r[1:]:  # forward heads: only earlier real keys, sums to 1
            assert_close(w[b, 0, i, :i].sum().double(), torch.tensor(1.0, dtype=torch.float64))
            assert w[b, 0, i, i:].abs().sum() == 0
        for i in r[:-1]:
            assert w[b, 2, i, : i + 1].abs().sum() == 0


def test_left_right_padding_and_unpadded_agree():
    args = make_args("disan", disan_layers="0", disan_directions="fw:1,bw:2,nodiag:1")
    attn = make_attention(args).eval()
    xl, kl = padded_batch([5, 2, 4], left_pad=True)
    xr, kr = padded_batch([5, 2, 4], left_pad=False)
    for b in range(3):
        xr[real_positions(kr[b]), b] = xl[real_positions(kl[b]), b]
    yl, _ = attn(xl, xl, xl, key_padding_mask=kl, need_weights=False)
    yr, _ = attn(xr, xr, xr, key_padding_mask=kr, need_weights=False)
    for b, (a, c) in enumerate(zip(real_rows(yl, kl), real_rows(yr, kr))):
        assert_close(a, c, rtol=1e-5, atol=1e-5)
        xs = xl[real_positions(kl[b]), b : b + 1]
        assert_close(attn(xs, xs, xs, need_weights=False)[0][:, 0], a, rtol=1e-5, atol=1e-5)


def test_all_heads_unmasked_equals_baseline():
    base = make_attention(make_args("")).eval()
    attn = make_attention(make_args("disan", disan_layers="0", disan_directions="all")).eval()
    attn.load_state_dict(base.state_dict())
    x, kpm = padded_batch([5, 3])
    assert_close(attn(x, x, x, key_padding_mask=kpm)[0], base(x, x, x, key_padding_mask=kpm)[0])
    masked = make_attention(make_args("disan", disan_layers="0")).eval()
    masked.load_state_dict(base.state_dict())
    diff = masked(x, x, x, key_padding_mask=kpm)[0] - base(x, x, x, key_padding_mask=kpm)[0]
    assert diff.abs().max() > 1e-3


def test_gradients_finite_with_empty_rows():
    attn = make_attention(make_args("disan", disan_layers="0")).train()
    x, kpm = padded_batch([5, 1])  # a one-token sentence: every directional head empty
    x.requires_grad_(True)
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    y.pow(2).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert attn.q_proj.weight.grad.abs().sum() > 0
    assert list(attn.pieces.parameters()) == []  # parameter-free


@pytest.mark.parametrize("diagonal", ["disable", "keep"])
def test_decoder_forward_heads_incremental_equals_full(diagonal):
    args = make_args("disan", disan_layers="0", disan_sides="decoder",
                     disan_directions="fw:2,nodiag:1,all:1",
                     disan_diagonal=diagonal)
    attn = make_attention(args, side="decoder").eval()
    T = 5
    x, _ = padded_batch([T, T])
    causal = torch.triu(torch.full((T, T), float("-inf")), 1)
    y_full, w_full = attn(x, x, x, attn_mask=causal, need_weights=True, need_head_weights=True)
    ref = output64(attn, reference(attn, x, None, ["fw", "fw", "nodiag", "all"],
                                   diagonal == "keep", causal=True))
    assert_close(y_full.double(), ref, rtol=1e-5, atol=1e-5)
    # training through the same masks: gradients stay finite (row 0 of the no-diagonal
    # head is emptied by the causal mask plus the piece's mask)
    attn.train()
    xg = x.clone().requires_grad_(True)
    attn(xg, xg, xg, attn_mask=causal, need_weights=False)[0].pow(2).sum().backward()
    assert torch.isfinite(xg.grad).all() and torch.isfinite(attn.q_proj.weight.grad).all()
    attn.eval()
    state = {}
    for t in range(T):
        xt = x[t : t + 1]
        yt, wt = attn(xt, xt, xt, incremental_state=state, need_weights=True, need_head_weights=True)
        assert_close(yt[0], y_full[t], rtol=1e-5, atol=1e-5)
        assert_close(wt[:, :, 0], w_full[:, :, t, : t + 1], rtol=1e-5, atol=1e-6)


def test_combines_with_csan2d():
    args = make_args("csan2d,disan", csan_layers="0", csan_window=3, csan_heads=3,
                     disan_layers="0")
    for backend in ("explicit", "fused"):
        attn = make_attention(args, backend=backend).eval()
        x, kpm = padded_batch([6, 3])
        y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
        ref = output64(attn, reference(attn, x, kpm, ["fw", "fw", "bw", "bw"], False, csan=(3, 3)))
        for got, exp in zip(real_rows(y, kpm), real_rows(ref, kpm)):
            assert_close(got.double(), exp, rtol=1e-5, atol=1e-5)


def test_parse_directions():
    assert parse_directions("bi", 8) == ["fw"] * 4 + ["bw"] * 4
    assert parse_directions("bi", 3) == ["fw", "fw", "bw"]
    assert parse_directions("nodiag", 2) == ["nodiag", "nodiag"]
    assert parse_directions("fw:1,bw:2,all", 4) == ["fw", "bw", "bw", "all"]
    for bad in ("fw:3", "up:4", "fw:0,bw:4", "fw:x,bw:2"):
        with pytest.raises(PieceConfigError, match="--disan-directions"):
            parse_directions(bad, 4)


def test_flags_validated():
    with pytest.raises(PieceConfigError, match="--disan-directions"):
        make_args("disan", disan_layers="0", disan_directions="fw:2,bw:1")
    with pytest.raises(PieceConfigError, match="--disan-diagonal"):
        make_args("disan", disan_layers="0", disan_diagonal="maybe")
    with pytest.raises(PieceConfigError, match="--disan-sides"):
        make_args("disan", disan_layers="0", disan_sides="both")
    with pytest.raises(PieceConfigError, match="--disan-layers"):
        make_args("disan", disan_layers="0-4")
    with pytest.raises(PieceConfigError, match="causal mask leaves backward heads"):
        make_args("disan", disan_layers="0", disan_sides="encoder,decoder")  # default 'bi' has backward heads
    with pytest.raises(PieceConfigError, match="--disan-layers"):
        make_args("disan")  # default 0-2 does not exist in a 2-layer model


def test_defaults_and_architectures():
    # defaults are checked against a 6-layer model (the lower three layers)
    args = make_args("disan", layers=6)
    assert (args.disan_directions, args.disan_diagonal, args.disan_sides, args.disan_layers) == (
        "bi", "auto", "encoder", "0-2")
    assert make_attention(args).pieces[0].keep_diagonal is False  # DiSAN: diagonal disabled
    assert len(make_attention(args, layer_idx=2).pieces) == 1
    assert len(make_attention(args, layer_idx=3).pieces) == 0
    assert len(make_attention(args, side="decoder").pieces) == 0
    assert "transformer_disan_wmt_en_de" in ARCH_MODEL_REGISTRY
    assert "transformer_disan_vaswani_wmt_en_de_big" in ARCH_MODEL_REGISTRY


# ---- the CSAN authors' Bi_Direct (attention_di.py) -------------------------------
def authors_bi_direct_reference(attn, x, kpm, n_pairs):
    """attention_di.py written out in float64: heads 0..H-2N-1 unmasked; the others
    alternate forward (j <= i) / backward (j >= i), diagonal included; pad keys masked.
    A row without keys (a left-pad query in a forward head) outputs zeros."""
    q, k, v = projections64(attn, x)
    B, H, T, D = q.shape
    out = torch.zeros(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = []
                for j in range(T):
                    if bool(kpm[b, j]):
                        continue
                    if h >= H - 2 * n_pairs:
                        forward = (h - (H - 2 * n_pairs)) % 2 == 0
                        if forward and j > i:
                            continue
                        if not forward and j < i:
                            continue
                    keys.append(j)
                if not keys:
                    continue
                e = [float(q[b, h, i] @ k[b, h, j]) / math.sqrt(D) for j in keys]
                m = max(e)
                w = [math.exp(a - m) for a in e]
                for j, wj in zip(keys, w):
                    out[b, h, i] += wj / sum(w) * v[b, h, j]
    return out


def test_bidirect_layout_is_the_authors():
    assert parse_directions("bidirect", 8) == ["all"] * 4 + ["fw", "bw", "fw", "bw"]
    assert parse_directions("bidirect", 16) == ["all"] * 8 + ["fw", "bw"] * 4
    assert parse_directions("bidirect:1", 8) == ["all"] * 6 + ["fw", "bw"]
    assert parse_directions("bidirect:4", 8) == ["fw", "bw"] * 4
    for bad in ("bidirect:0", "bidirect:5", "bidirect:x"):
        with pytest.raises(PieceConfigError, match="--disan-directions.*1 <= N <= 4"):
            parse_directions(bad, 8)


@pytest.mark.parametrize("heads, spec, n_pairs", [(8, "bidirect", 2), (4, "bidirect", 1),
                                                   (8, "bidirect:3", 3)])
@pytest.mark.parametrize("backend", ["explicit", "fused"])
@pytest.mark.parametrize("left_pad", [True, False])
def test_bidirect_matches_authors_loop_reference(heads, spec, n_pairs, backend, left_pad):
    args = make_args("disan", heads=heads, disan_layers="0", disan_directions=spec)
    attn = make_attention(args, embed_dim=2 * heads, num_heads=heads, backend=backend).eval()
    assert attn.pieces[0].keep_diagonal  # --disan-diagonal auto keeps it for bidirect
    x, kpm = padded_batch([6, 1, 4], embed_dim=2 * heads, left_pad=left_pad)
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    assert torch.isfinite(y).all()  # left pad: pad queries of forward heads see only pads
    ref = output64(attn, authors_bi_direct_reference(attn, x, kpm, n_pairs))
    for got, exp in zip(real_rows(y, kpm), real_rows(ref, kpm)):
        assert_close(got.double(), exp, rtol=1e-5, atol=1e-5)


def test_bidirect_gradients_finite_with_left_padding():
    attn = make_attention(make_args("disan", disan_layers="0", disan_directions="bidirect")).train()
    x, kpm = padded_batch([6, 1, 3], left_pad=True)
    x.requires_grad_(True)
    attn(x, x, x, key_padding_mask=kpm, need_weights=False)[0].pow(2).sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(attn.q_proj.weight.grad).all()


def test_bidirect_diagonal_can_be_disabled_explicitly():
    args = make_args("disan", disan_layers="0", disan_directions="bidirect", disan_diagonal="disable")
    assert make_attention(args).pieces[0].keep_diagonal is False
    args = make_args("disan", disan_layers="0", disan_directions="bi", disan_diagonal="keep")
    assert make_attention(args).pieces[0].keep_diagonal is True


@pytest.mark.parametrize("size, heads, layout", [
    ("wmt_en_de", 8, ["all"] * 4 + ["fw", "bw", "fw", "bw"]),
    ("vaswani_wmt_en_de_big", 16, ["all"] * 8 + ["fw", "bw"] * 4),
])
def test_bidirect_architectures(size, heads, layout):
    from fairseq import options

    args = options.parse_args_and_arch(options.get_training_parser(),
                                       ["/x", "--arch", f"transformer_bidirect_{size}"])
    assert f"transformer_bidirect_{size}" in ARCH_MODEL_REGISTRY
    assert (args.attn_pieces, args.disan_directions, args.disan_diagonal, args.disan_layers,
            args.disan_sides) == ("disan", "bidirect", "auto", "0-2", "encoder")
    assert args.encoder_attention_heads == heads
    from fairseq_attn_core import AttentionSite, build_pieces, validate_attention_args

    validate_attention_args(args, fairseq_namespace=True)  # fairseq-train's parsed namespace
    for layer in range(6):
        pieces = build_pieces(args, AttentionSite("encoder", layer, 6, heads, 64))
        if layer < 3:
            assert pieces[0].directions == layout and pieces[0].keep_diagonal
        else:
            assert pieces == []
    assert build_pieces(args, AttentionSite("decoder", 0, 6, heads, 64)) == []
    # DiSAN's own masks stay available under their own architecture
    disan = options.parse_args_and_arch(options.get_training_parser(),
                                        ["/x", "--arch", f"transformer_disan_{size}"])
    assert disan.disan_directions == "bi"
