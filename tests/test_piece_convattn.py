"""Convoluted attention (convattn1d, convattn2d): loop references, padding, identity
baseline, explicit-only, grads, encoder-only, length errors, conflicts, flags."""

import pytest
import torch

from attn_helpers import make_args, make_attention, output64, padded_batch, projections64, path_name
from fairseq_attn_core import PieceConfigError
from piece_refs import (
    assert_gradients_reach,
    assert_matches_reference,
    assert_padding_invariant,
    loop_apply64,
    loop_conv1d_attention,
    loop_conv2d_attention,
    loop_probs64,
)

T_MAX = 6
TOL = dict(rtol=1e-6, atol=1e-6)  # the core's softmax runs in float32


def conv_attention(name, backend="explicit", **flags):
    flags.setdefault("convattn_layers", "0")
    flags.setdefault("convattn_max_len", T_MAX)
    attn = make_attention(make_args(name, **flags), backend=backend)
    with torch.no_grad():  # non-zero biases so that they matter
        attn.pieces[0].bias.normal_(0, 0.05)
    return attn


def reference(attn, x, kpm):
    piece = attn.pieces[0]
    q, k, v = projections64(attn, x)
    probs = loop_probs64(q, k, kpm)
    relu = piece.activation == "relu"
    if piece.name == "convattn1d":
        conv = loop_conv1d_attention(probs, kpm, piece.weight.double(), piece.bias.double(),
                                     piece.max_len, piece.kernel, relu)
    else:
        conv = loop_conv2d_attention(probs, kpm, piece.weight.double(), piece.bias.double(),
                                     piece.kernel, relu)
    return output64(attn, loop_apply64(conv, v))


@pytest.mark.parametrize("name, kernel, act", [
    ("convattn1d", 3, "relu"),
    ("convattn1d", 1, "linear"),
    ("convattn2d", 3, "relu"),
    ("convattn2d", 5, "linear"),
])
def test_matches_loop_reference(name, kernel, act):
    attn = conv_attention(name, convattn_kernel=kernel, convattn_activation=act).double()
    assert_matches_reference(attn, reference, [5, 3], **TOL)


@pytest.mark.parametrize("name", ["convattn1d", "convattn2d"])
def test_padding_invariance_left_and_right(name):
    assert_padding_invariant(conv_attention(name), [5, 2, 4])


@pytest.mark.parametrize("name", ["convattn1d", "convattn2d"])
def test_identity_filters_equal_baseline(name):
    x, kpm = padded_batch([5, 3])
    attn = make_attention(make_args(name, convattn_layers="0", convattn_max_len=T_MAX,
                                    convattn_init="identity"))
    base = make_attention(make_args(""))
    attn.load_state_dict(base.state_dict(), strict=False)
    with torch.no_grad():
        attn.pieces[0].bias.zero_()  # make_attention randomises every bias
    y, _ = attn(x, x, x, key_padding_mask=kpm)
    y0, _ = base(x, x, x, key_padding_mask=kpm)
    real = ~kpm.t()  # padded query rows are zeroed by the piece, not by the baseline
    torch.testing.assert_close(y[real], y0[real])


@pytest.mark.parametrize("name", ["convattn1d", "convattn2d"])
def test_not_renormalised(name):
    attn = conv_attention(name)
    x, kpm = padded_batch([5, 3])
    _, w = attn(x, x, x, key_padding_mask=kpm, need_head_weights=True)  # (H, B, T, S)
    sums = w.sum(-1)[:, 0]  # a sentence without padding
    assert float((sums - 1).abs().max()) > 1e-3
    assert bool((w[:, 1][..., kpm[1]] == 0).all())  # padded keys stay zero
    assert bool((w[:, 1][:, kpm[1]] == 0).all())  # padded query rows too


@pytest.mark.parametrize("name", ["convattn1d", "convattn2d"])
def test_explicit_path_only(name):
    assert path_name(conv_attention(name, backend="auto")) == "explicit"
    with pytest.raises(PieceConfigError, match="fused"):
        make_args(name, attn_backend="fused")


@pytest.mark.parametrize("name", ["convattn1d", "convattn2d"])
def test_gradients_reach_every_filter_weight(name):
    attn = conv_attention(name, convattn_activation="linear")
    assert_gradients_reach(attn, [T_MAX, 3], "weight", "bias")  # a full-length sentence uses every channel


@pytest.mark.parametrize("name", ["convattn1d", "convattn2d"])
def test_encoder_only_all_layers_by_default(name):
    args = make_args(name, convattn_max_len=T_MAX)
    assert (args.convattn_kernel, args.convattn_layers, args.convattn_activation) == (3, "all", "relu")
    assert len(make_attention(args, layer_idx=1).pieces) == 1
    assert not make_attention(args, side="decoder").pieces


def test_shapes_follow_the_paper():
    one = conv_attention("convattn1d").pieces[0]
    assert one.weight.shape == (4 * T_MAX, T_MAX, 3)  # t filters x t channels x width 3, per head
    two = conv_attention("convattn2d").pieces[0]
    assert two.weight.shape == (4, 1, 3, 3)  # one 3x3 filter per head


def test_1d_longer_input_fails_naming_the_flag():
    attn = conv_attention("convattn1d")
    x, kpm = padded_batch([T_MAX + 1, 2])
    with pytest.raises(ValueError, match="--convattn-max-len"):
        attn(x, x, x, key_padding_mask=kpm)


@pytest.mark.parametrize("pieces", ["convattn1d,csan2d", "convattn2d,csan2d", "convattn1d,convattn2d"])
def test_conflicts_are_declared(pieces):
    with pytest.raises(PieceConfigError, match="conflict"):
        make_args(pieces)


def test_default_t_caps_source_positions_with_a_warning(caplog):
    """Without --convattn-max-len, t = min(--max-source-positions, 256) and longer
    sources are left to fairseq's own length filter (so the default arch trains)."""
    import logging

    with caplog.at_level(logging.WARNING):
        args = make_args("convattn1d", max_source_positions=1024)
    assert args.convattn_max_len == 256 and args.max_source_positions == 256
    assert "--max-source-positions" in caplog.text
    short = make_args("convattn1d", max_source_positions=100)
    assert short.convattn_max_len == 100 and short.max_source_positions == 100
    explicit = make_args("convattn1d", convattn_max_len=32, max_source_positions=64)
    assert explicit.convattn_max_len == 32 and explicit.max_source_positions == 32
