"""Direct position interactions (dpi): loop reference (paper and circulant forms),
padding, neutral, fused, grads, incremental, length errors, flags."""

import math

import pytest
import torch

from attn_helpers import make_args, make_attention, output64, padded_batch, projections64, path_name
from piece_refs import (
    assert_gradients_reach,
    assert_incremental_equals_full,
    assert_matches_reference,
    assert_padding_invariant,
    loop_apply64,
    loop_probs64,
    sentence_positions,
)

T_MAX = 6


def dpi_attention(backend="explicit", side="encoder", **flags):
    flags.setdefault("dpi_layers", "0")
    flags.setdefault("dpi_max_len", T_MAX)
    flags.setdefault("dpi_sides", "both")
    t = flags["dpi_max_len"]
    flags.setdefault("max_source_positions", t)  # fairseq's limits must fit the tables
    flags.setdefault("max_target_positions", t)
    return make_attention(make_args("dpi", **flags), side=side, backend=backend)


def circulant_value(r, k):
    """Re(IDFT(r))_k written out: (1/N) sum_m r_m cos(2 pi m k / N)."""
    N = len(r)
    return sum(float(r[m]) * math.cos(2 * math.pi * m * k / N) for m in range(N)) / N


def reference(attn, x, kpm):
    piece = attn.pieces[0]
    t = piece.max_len
    q, k, v = projections64(attn, x)
    pos = [sentence_positions(kpm[b]) for b in range(kpm.size(0))]

    def bias(b, h, i, j):
        pi, pj = pos[b][i], pos[b][j]
        s = 0.0
        if piece.absolute is not None:
            s += float(piece.absolute[h, pi, pj])
        if piece.relative is not None:
            if piece.relative_form == "paper":
                s += float(piece.relative[h, pi - pj + t - 1])  # a_{i-j+t}, 1-based
            else:
                s += circulant_value(piece.relative[h].double(), (pi - pj) % (2 * t))
        return s

    return output64(attn, loop_apply64(loop_probs64(q, k, kpm, bias), v))


@pytest.mark.parametrize("mode, form, backend", [
    ("p", "paper", "explicit"),
    ("r", "paper", "fused"),
    ("pr", "paper", "explicit"),
    ("pr", "circulant", "explicit"),
])
def test_matches_loop_reference(mode, form, backend):
    attn = dpi_attention(backend, dpi_mode=mode, dpi_relative_form=form).double()
    assert_matches_reference(attn, reference, [5, 3])


def test_circulant_form_is_symmetric_and_uses_all_2t_values():
    attn = dpi_attention(dpi_mode="r", dpi_relative_form="circulant")
    piece = attn.pieces[0]
    assert piece.relative.shape == (4, 2 * T_MAX)
    x, _ = padded_batch([T_MAX])
    y, _ = attn(x, x, x)
    c = piece.relative_values()
    for k in range(1, 2 * T_MAX):
        torch.testing.assert_close(c[:, k], c[:, 2 * T_MAX - k])  # c_k = c_{2t-k}
    y.sum().backward()
    assert bool((piece.relative.grad != 0).all())


def test_paper_form_stores_the_2t_minus_1_reachable_offsets():
    piece = dpi_attention(dpi_mode="r").pieces[0]
    assert piece.relative.shape == (4, 2 * T_MAX - 1)


@pytest.mark.parametrize("form", ["paper", "circulant"])
def test_padding_invariance_left_and_right(form):
    assert_padding_invariant(dpi_attention(dpi_relative_form=form), [5, 2, 4])


def test_zero_tables_equal_baseline():
    x, kpm = padded_batch([4, 3])
    attn = dpi_attention(dpi_init="zeros")
    base = make_attention(make_args(""))
    y, _ = attn(x, x, x, key_padding_mask=kpm)
    y0, _ = base(x, x, x, key_padding_mask=kpm)
    torch.testing.assert_close(y, y0)


def test_glorot_init_scale():
    piece = dpi_attention().pieces[0]
    std_p, std_r = math.sqrt(1 / T_MAX), (2 * T_MAX) ** -0.25
    assert float(piece.absolute.abs().max()) <= 2 * std_p + 1e-6
    assert float(piece.relative.abs().max()) <= 2 * std_r + 1e-6
    assert float(piece.absolute.std()) > 0.3 * std_p


def test_fused_equals_explicit():
    x, kpm = padded_batch([5, 3])
    assert path_name(dpi_attention("auto")) == "fused"
    yf, _ = dpi_attention("fused")(x, x, x, key_padding_mask=kpm, need_weights=False)
    ye, _ = dpi_attention("explicit")(x, x, x, key_padding_mask=kpm, need_weights=False)
    torch.testing.assert_close(yf, ye, rtol=1e-5, atol=1e-5)


def test_gradients_reach_every_table_entry():
    attn = dpi_attention()
    assert_gradients_reach(attn, [T_MAX, 3], "absolute", "relative")  # a full-length sentence reaches every entry


def test_incremental_decoding_equals_full_forward():
    attn = dpi_attention(side="decoder").eval()
    assert_incremental_equals_full(attn)


def test_longer_input_fails_naming_the_flag():
    attn = dpi_attention()
    x, kpm = padded_batch([T_MAX + 1, 2])
    with pytest.raises(ValueError, match="--dpi-max-len"):
        attn(x, x, x, key_padding_mask=kpm)
    # padding alone never counts: a long batch of short sentences is fine
    x, kpm = padded_batch([T_MAX, 2])
    attn(x, x, x, key_padding_mask=kpm)


def test_first_layer_encoder_only_by_default():
    defaults = make_args("dpi")
    assert (defaults.dpi_layers, defaults.dpi_sides, defaults.dpi_mode, defaults.dpi_max_len,
            defaults.dpi_relative_form, defaults.dpi_init) == ("0", "encoder", "pr", 1024, "paper", "glorot")
    args = make_args("dpi", dpi_max_len=8, max_source_positions=8)
    assert len(make_attention(args, layer_idx=0).pieces) == 1
    assert not make_attention(args, layer_idx=1).pieces
    assert not make_attention(args, side="decoder", layer_idx=0).pieces


# ---- SAN+P+R architecture --------------------------------------------------------
def test_san_pr_architecture_replaces_the_position_embeddings():
    """transformer_dpi_sanpr_*: P and R tables on the first layer of encoder and decoder,
    no token position embeddings; the first encoder layer's self-attention equals the
    paper's formula written out (A^p_ij + a^r_{i-j+t} per head, in-sentence positions)."""
    from attn_helpers import build_model

    t = 8
    pos = ["--dpi-max-len", str(t), "--max-source-positions", str(t), "--max-target-positions", str(t)]
    model, _, args = build_model("transformer_dpi_sanpr_wmt_en_de", extra=pos)
    assert (args.attn_pieces, args.dpi_mode, args.dpi_sides, args.dpi_layers) == ("dpi", "pr", "both", "0")
    assert args.no_token_positional_embeddings
    assert model.encoder.embed_positions is None and model.decoder.embed_positions is None
    for stack in (model.encoder, model.decoder):
        (piece,) = stack.layers[0].self_attn.pieces
        assert piece.absolute is not None and piece.relative is not None
        assert not stack.layers[1].self_attn.pieces
    attn = model.encoder.layers[0].self_attn.double().eval()
    piece = attn.pieces[0]
    x, kpm = padded_batch([5, 3], left_pad=True, dtype=torch.float64)
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    q, k, v = projections64(attn, x)
    pos_of = [sentence_positions(kpm[b]) for b in range(2)]

    def bias(b, h, i, j):
        pi, pj = pos_of[b][i], pos_of[b][j]
        return float(piece.absolute[h, pi, pj]) + float(piece.relative[h, pi - pj + t - 1])

    ref = output64(attn, loop_apply64(loop_probs64(q, k, kpm, bias), v))
    real = ~kpm.t()
    torch.testing.assert_close(y[real], ref[real], rtol=1e-6, atol=1e-6)
    # the big architecture too
    _, _, big = build_model("transformer_dpi_sanpr_vaswani_wmt_en_de_big", extra=pos)
    assert (big.dpi_mode, big.dpi_sides, big.no_token_positional_embeddings) == ("pr", "both", True)
