"""Shared invariance tests, run for EVERY registered piece (xformers style):
a new piece in fairseq_attn_core/pieces/ is covered automatically through its
``test_flags``."""

import itertools

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, padded_batch, path_name
from fairseq_attn_core import PIECES, AttentionSite, build_pieces

NAMES = sorted(PIECES)


def piece_args(*names, **extra):
    flags = {}
    for n in names:
        flags.update(PIECES[n].test_flags)
    flags.update(extra)
    return make_args(",".join(names), **flags)


def active_sides(name):
    args = piece_args(name)
    return [s for s in ("encoder", "decoder")
            if build_pieces(args, AttentionSite(s, 0, 2, 4, 4))]


def test_every_piece_is_active_with_its_test_flags():
    for name in NAMES:
        assert active_sides(name), f"{name}: test_flags do not activate it on layer 0"


def test_every_piece_has_a_docstring_with_formula_and_backends():
    for name, cls in PIECES.items():
        doc = (cls.__doc__ or "") + (__import__(cls.__module__, fromlist=["x"]).__doc__ or "")
        assert len(doc) > 200, f"{name}: document paper, formula, defaults and backends"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("left_pad", [True, False])
def test_padding_invariance(name, left_pad):
    for side in active_sides(name):
        attn = make_attention(piece_args(name), side=side).eval()
        lengths = [7, 3, 5]
        x, kpm = padded_batch(lengths, left_pad=left_pad)
        T = max(lengths)
        causal = torch.triu(torch.full((T, T), float("-inf")), 1) if side == "decoder" else None
        if side == "decoder" and left_pad:
            continue  # fairseq right-pads targets; causal + left pad has no meaning
        x_in = attn.layer_input(x, kpm) if side == "encoder" else x  # model-level hook (cnns)
        out, _ = attn(x_in, x_in, x_in, key_padding_mask=kpm, attn_mask=causal, need_weights=False)
        for b, n in enumerate(lengths):
            rows = slice(T - n, T) if left_pad else slice(0, n)
            alone = x[rows, b : b + 1]
            if side == "encoder":
                alone = attn.layer_input(alone, None)
                assert_close(x_in[rows, b : b + 1], alone, rtol=1e-5, atol=1e-5)
            mask = causal[:n, :n] if causal is not None else None
            ref, _ = attn(alone, alone, alone, attn_mask=mask, need_weights=False)
            assert_close(out[rows, b : b + 1], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_fused_and_explicit_agree(name):
    if not PIECES[name].fused_ok_with(piece_args(name)):
        pytest.skip(f"{name} runs on the explicit path only (with its test flags)")
    for side in active_sides(name):
        fused = make_attention(piece_args(name), side=side, backend="fused").eval()
        explicit = make_attention(piece_args(name), side=side, backend="explicit").eval()
        explicit.load_state_dict(fused.state_dict())
        x, kpm = padded_batch([6, 4], left_pad=side == "encoder")
        res = []
        for attn in (fused, explicit):
            xi = x.clone().requires_grad_(True)
            out, _ = attn(xi, xi, xi, key_padding_mask=kpm, need_weights=False)
            out.pow(2).sum().backward()
            res.append((out, xi.grad))
        assert_close(res[0][0], res[1][0], rtol=1e-5, atol=1e-6)
        assert_close(res[0][1], res[1][1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_gradients_reach_every_parameter(name):
    for side in active_sides(name):
        attn = make_attention(piece_args(name), side=side).train()
        x, kpm = padded_batch([6, 4])
        if side == "encoder":
            x = attn.layer_input(x, kpm)  # model-level hook (cnns)
        out, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
        (out * torch.randn_like(out)).sum().backward()
        for pname, p in attn.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), pname
            assert p.grad.abs().sum() > 0, f"{name}: no gradient reaches {pname}"


@pytest.mark.parametrize("name", NAMES)
def test_incremental_decoding_equals_full_forward(name):
    if "decoder" not in active_sides(name):
        pytest.skip(f"{name} is encoder-only")
    attn = make_attention(piece_args(name), side="decoder").eval()
    x, _ = padded_batch([6, 6], left_pad=False)
    causal = torch.triu(torch.full((6, 6), float("-inf")), 1)
    full, w_full = attn(x, x, x, attn_mask=causal, need_head_weights=True)
    state = {}
    for t in range(6):
        step = x[t : t + 1]
        out, w = attn(step, step, step, incremental_state=state, need_head_weights=True)
        assert_close(out, full[t : t + 1], rtol=1e-5, atol=1e-6)
        assert_close(w, w_full[:, :, t : t + 1, : t + 1], rtol=1e-5, atol=1e-6)


COMPATIBLE_PAIRS = [
    (a, b) for a, b in itertools.combinations(NAMES, 2)
    if b not in PIECES[a].conflicts and a not in PIECES[b].conflicts
]


@pytest.mark.parametrize("pair", COMPATIBLE_PAIRS or [None])
def test_compatible_pairs_combine_in_one_module(pair):
    if pair is None:
        pytest.skip("no compatible pair registered yet")
    args = piece_args(*pair)
    for side in ("encoder", "decoder"):
        attn = make_attention(args, side=side).train()
        assert {p.name for p in attn.pieces} <= set(pair)
        x, kpm = padded_batch([6, 4], left_pad=side == "encoder")
        causal = torch.triu(torch.full((6, 6), float("-inf")), 1) if side == "decoder" else None
        out, _ = attn(x, x, x, key_padding_mask=kpm, attn_mask=causal, need_weights=False)
        assert torch.isfinite(out).all()
        out.sum().backward()


@pytest.mark.parametrize("a, b", [(a, b) for a in NAMES for b in PIECES[a].conflicts])
def test_conflicting_pieces_fail_with_reason(a, b):
    from fairseq_attn_core import PieceConfigError

    with pytest.raises(PieceConfigError, match=f"{a}|{b}") as err:
        piece_args(a, b)
    assert "conflict" in str(err.value)


def test_fused_backend_is_decided_by_the_configured_mode():
    """relpos keys-only and DropAttention's normalized rescaling run fused, so
    --attn-backend fused is accepted for them and refused for the other modes."""
    from fairseq_attn_core import PieceConfigError

    args = piece_args("relpos", relpos_mode="k", attn_backend="fused")
    attn = make_attention(args, backend="fused")
    assert path_name(attn) == "fused"
    for name, flags in (("relpos", dict(relpos_mode="kv")), ("relpos", dict(relpos_mode="tied")),
                        ("dropattn_e", dict(dropattn_rescale="traditional"))):
        with pytest.raises(PieceConfigError, match="--attn-backend fused.*" + name):
            piece_args(name, attn_backend="fused", **flags)
    assert piece_args("dropattn_e", attn_backend="fused").dropattn_rescale == "normalized"
