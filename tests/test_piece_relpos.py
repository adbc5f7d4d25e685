"""relpos (Shaw et al. 2018): the float64 reference, padding, neutral tables,
fused vs explicit, gradients, incremental decoding, combination with csan2d."""

import math

import pytest
import torch
from fairseq.models import ARCH_MODEL_REGISTRY
from torch.testing import assert_close

from attn_helpers import (
    make_args,
    make_attention,
    output64,
    padded_batch,
    projections64,
    real_positions, path_name,
)
from distance_refs import shaw64
from fairseq_attn_core import PieceConfigError


def relpos_piece(attn):
    (piece,) = [p for p in attn.pieces if p.name == "relpos"]
    return piece


def randomize_tables(attn, seed=5):
    g = torch.Generator().manual_seed(seed)
    piece = relpos_piece(attn)
    with torch.no_grad():
        for p in piece.parameters():
            p.copy_(torch.randn(p.shape, generator=g))


def reference(attn, x, kpm, mode, k, causal=False):
    """The float64 Shaw reference (distance_refs.py) on the layer's projections and tables:
    per-head outputs (B, H, T, D) and probabilities (B, H, T, T)."""
    q, kk, v = projections64(attn, x)
    piece = relpos_piece(attn)
    wv = {"kv": piece.rel_values, "tied": piece.rel_keys, "k": None}[mode]
    return shaw64(q, kk, v, piece.rel_keys.double(), None if wv is None else wv.double(), k,
                  attn.head_dim ** -0.5, kpm, causal=causal)


def real_rows(y, kpm):
    """(T, B, C) -> list of (n_b, C) rows of real tokens."""
    return [y[real_positions(kpm[b]), b] for b in range(kpm.size(0))]


@pytest.mark.parametrize("mode", ["kv", "k", "tied"])
@pytest.mark.parametrize("left_pad", [True, False])
def test_matches_loop_reference(mode, left_pad):
    k = 2  # shorter than the sentences, so clipping is exercised
    args = make_args("relpos", relpos_k=k, relpos_mode=mode)
    attn = make_attention(args, backend="explicit").eval()
    randomize_tables(attn)
    x, kpm = padded_batch([6, 3, 5], left_pad=left_pad)
    y, w = attn(x, x, x, key_padding_mask=kpm, need_weights=True, need_head_weights=True)
    ref_heads, ref_probs = reference(attn, x, kpm, mode, k)
    ref = output64(attn, ref_heads)
    for got, exp in zip(real_rows(y, kpm), real_rows(ref, kpm)):
        assert_close(got.double(), exp, rtol=1e-5, atol=1e-5)
    w = w.transpose(0, 1)  # (B, H, T, S)
    for b in range(kpm.size(0)):
        r = real_positions(kpm[b])
        assert_close(w[b][:, r][:, :, r].double(), ref_probs[b][:, r][:, :, r], rtol=1e-5, atol=1e-6)


def test_left_and_right_padding_agree():
    args = make_args("relpos", relpos_k=2)
    attn = make_attention(args).eval()
    randomize_tables(attn)
    xl, kl = padded_batch([5, 2, 4], left_pad=True)
    xr, kr = padded_batch([5, 2, 4], left_pad=False)
    # same real tokens in both layouts
    for b in range(3):
        xr[real_positions(kr[b]), b] = xl[real_positions(kl[b]), b]
    yl, _ = attn(xl, xl, xl, key_padding_mask=kl, need_weights=False)
    yr, _ = attn(xr, xr, xr, key_padding_mask=kr, need_weights=False)
    for a, b in zip(real_rows(yl, kl), real_rows(yr, kr)):
        assert_close(a, b, rtol=1e-5, atol=1e-5)
    # and equal to each sentence run alone without padding
    for b in range(3):
        xs = xl[real_positions(kl[b]), b : b + 1]
        ys, _ = attn(xs, xs, xs, need_weights=False)
        assert_close(ys[:, 0], real_rows(yl, kl)[b], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["kv", "tied"])
def test_zero_tables_equal_baseline(mode):
    base = make_attention(make_args(""), backend="explicit").eval()
    attn = make_attention(make_args("relpos", relpos_mode=mode), backend="explicit").eval()
    attn.load_state_dict(base.state_dict(), strict=False)
    with torch.no_grad():
        for p in relpos_piece(attn).parameters():
            p.zero_()
    x, kpm = padded_batch([4, 2])
    y0, w0 = base(x, x, x, key_padding_mask=kpm)
    y1, w1 = attn(x, x, x, key_padding_mask=kpm)
    assert_close(y1, y0)
    assert_close(w1, w0)
    # non-zero tables do change the output (the comparison above can fail)
    randomize_tables(attn)
    y2, _ = attn(x, x, x, key_padding_mask=kpm)
    assert (y2 - y0).abs().max() > 1e-3


def test_keys_only_runs_fused_and_agrees_with_explicit():
    args = make_args("relpos", relpos_k=2, relpos_mode="k")
    fused = make_attention(args, backend="auto").eval()
    randomize_tables(fused)
    assert path_name(fused) == "fused"
    explicit = make_attention(args, backend="explicit").eval()
    explicit.load_state_dict(fused.state_dict())
    x, kpm = padded_batch([5, 3])
    yf, _ = fused(x, x, x, key_padding_mask=kpm, need_weights=False)
    ye, _ = explicit(x, x, x, key_padding_mask=kpm, need_weights=False)
    assert_close(yf, ye, rtol=1e-5, atol=1e-5)
    # the value tables need the probabilities: explicit path
    full = make_attention(make_args("relpos"), backend="auto")
    assert path_name(full) == "explicit"


@pytest.mark.parametrize("mode", ["kv", "tied"])
def test_gradients_reach_tables(mode):
    attn = make_attention(make_args("relpos", relpos_k=2, relpos_mode=mode)).train()
    x, kpm = padded_batch([5, 3])
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    y.pow(2).sum().backward()
    params = dict(relpos_piece(attn).named_parameters())
    assert set(params) == ({"rel_keys", "rel_values"} if mode == "kv" else {"rel_keys"})
    for name, p in params.items():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("mode", ["kv", "k"])
def test_incremental_decoding_equals_full_forward(mode):
    args = make_args("relpos", relpos_k=2, relpos_mode=mode)
    attn = make_attention(args, side="decoder").eval()
    randomize_tables(attn)
    T = 6
    x, _ = padded_batch([T, T])
    causal = torch.triu(torch.full((T, T), float("-inf")), 1)  # fairseq's future mask
    y_full, w_full = attn(x, x, x, attn_mask=causal, need_weights=True, need_head_weights=True)
    state = {}
    for t in range(T):
        xt = x[t : t + 1]
        yt, wt = attn(xt, xt, xt, incremental_state=state, need_weights=True, need_head_weights=True)
        assert_close(yt[0], y_full[t], rtol=1e-5, atol=1e-5)
        assert_close(wt[:, :, 0], w_full[:, :, t, : t + 1], rtol=1e-5, atol=1e-6)
    # and the full forward is the loop reference with the causal mask
    ref_heads, _ = reference(attn, x, None, mode, 2, causal=True)
    assert_close(y_full.double(), output64(attn, ref_heads), rtol=1e-5, atol=1e-5)


def test_combines_with_csan2d():
    """Widened key axis: query of head h scores keys of heads h-1..h+1 (cut at the edges)
    inside a window of 3, each with a^K of its distance; values get a^V."""
    k = 1
    args = make_args("csan2d,relpos", relpos_k=k, csan_layers="0", csan_window=3, csan_heads=3)
    attn = make_attention(args, backend="explicit").eval()
    randomize_tables(attn)
    piece = relpos_piece(attn)
    x, kpm = padded_batch([5, 3])
    y, w = attn(x, x, x, key_padding_mask=kpm, need_weights=True, need_head_weights=True)
    q, kk, v = projections64(attn, x)
    B, H, T, D = q.shape
    wk, wv = piece.rel_keys.double(), piece.rel_values.double()
    out = torch.zeros(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        real = real_positions(kpm[b])
        for h in range(H):
            for i in real:
                slots = [(h2, j) for h2 in (h - 1, h, h + 1) if 0 <= h2 < H
                         for j in real if abs(j - i) <= 1]
                e = [float(q[b, h, i] @ (kk[b, h2, j] + wk[max(-k, min(k, j - i)) + k])) / math.sqrt(D)
                     for h2, j in slots]
                m = max(e)
                ex = [math.exp(a - m) for a in e]
                for (h2, j), a in zip(slots, ex):
                    out[b, h, i] += a / sum(ex) * (v[b, h2, j] + wv[max(-k, min(k, j - i)) + k])
    ref = output64(attn, out)
    for got, exp in zip(real_rows(y, kpm), real_rows(ref, kpm)):
        assert_close(got.double(), exp, rtol=1e-5, atol=1e-5)


def test_flags_validated_with_the_flag_name():
    with pytest.raises(PieceConfigError, match="--relpos-k"):
        make_args("relpos", relpos_k=0)
    with pytest.raises(PieceConfigError, match="--relpos-mode"):
        make_args("relpos", relpos_mode="both")
    with pytest.raises(PieceConfigError, match="--relpos-sides"):
        make_args("relpos", relpos_sides="encoder,cross")
    with pytest.raises(PieceConfigError, match="--relpos-layers"):
        make_args("relpos", relpos_layers="0-5")
    with pytest.raises(PieceConfigError, match="--relpos-abs-pos"):
        make_args("relpos", relpos_abs_pos="none")
    with pytest.raises(PieceConfigError, match="--relpos-abs-pos drop"):
        make_args("relpos", relpos_sides="encoder")  # default drop: needs both sides
    make_args("relpos", relpos_sides="encoder", relpos_abs_pos="keep")


def test_defaults_and_abs_pos_mapping():
    args = make_args("relpos")
    assert (args.relpos_k, args.relpos_mode, args.relpos_sides, args.relpos_layers) == (
        16, "kv", "encoder,decoder", "all")
    # the paper's relative model has no absolute positions
    assert args.relpos_abs_pos == "drop" and args.no_token_positional_embeddings is True
    args = make_args("relpos", relpos_abs_pos="keep")
    assert not getattr(args, "no_token_positional_embeddings", False)
    # decoder side built, one table pair per layer of shape (2k+1, d_head)
    attn = make_attention(make_args("relpos", relpos_k=3), side="decoder", layer_idx=1)
    assert relpos_piece(attn).rel_keys.shape == (7, 4)
    assert relpos_piece(attn).rel_values.shape == (7, 4)
    enc_only = make_args("relpos", relpos_sides="encoder", relpos_abs_pos="keep")
    assert len(make_attention(enc_only, side="decoder").pieces) == 0


def test_architectures_registered():
    assert "transformer_relpos_wmt_en_de" in ARCH_MODEL_REGISTRY
    assert "transformer_relpos_vaswani_wmt_en_de_big" in ARCH_MODEL_REGISTRY


def _tiny_model(**flags):
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY

    from attn_helpers import toy_dictionary
    from fairseq_attn_plugins.models.transformer_attn import AttnTransformerModel

    args = argparse.Namespace(
        encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_layers=2, encoder_attention_heads=4,
        decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=2, decoder_attention_heads=4,
        max_source_positions=64, max_target_positions=64, **flags,
    )
    ARCH_CONFIG_REGISTRY["transformer_relpos_wmt_en_de"](args)
    d = toy_dictionary()
    task = argparse.Namespace(source_dictionary=d, target_dictionary=d)
    return AttnTransformerModel.build_model(args, task)


def test_model_build_keeps_or_replaces_sinusoidal_positions():
    model = _tiny_model(relpos_k=2, relpos_abs_pos="keep")
    assert model.encoder.embed_positions is not None and model.decoder.embed_positions is not None
    attn = model.decoder.layers[1].self_attn
    assert [p.name for p in attn.pieces] == ["relpos"]
    model = _tiny_model(relpos_k=2)  # default: relative positions replace the sinusoids
    assert model.encoder.embed_positions is None and model.decoder.embed_positions is None
    with pytest.raises(PieceConfigError, match="--relpos-k"):
        _tiny_model(relpos_k=-1)


def test_beam_search_with_cached_keys_scores_like_full_forward():
    """fairseq's SequenceGenerator (incremental decoding, beam reordering of the cache):
    every hypothesis' positional scores equal a full-sequence forward of its tokens."""
    from fairseq.sequence_generator import SequenceGenerator

    torch.manual_seed(0)
    model = _tiny_model(relpos_k=2).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)  # peaky distributions: beams diverge and get reordered
    d = model.decoder.dictionary
    src = torch.tensor([[d.pad(), 5, 6, 7, 8, d.eos()], [9, 10, 11, 12, 13, d.eos()]])
    lens = torch.tensor([5, 6])
    gen = SequenceGenerator([model], d, beam_size=3, max_len_b=7, min_len=7)
    out = gen.forward({"net_input": {"src_tokens": src, "src_lengths": lens}})
    for b, hyps in enumerate(out):
        assert len(hyps) == 3
        for h in hyps:
            toks = h["tokens"]
            prev = torch.cat([torch.tensor([d.eos()]), toks[:-1]])[None]
            logits, _ = model(src[b : b + 1, 1 - b :], lens[b : b + 1], prev)
            lp = torch.log_softmax(logits.float(), -1)[0].gather(-1, toks[:, None])[:, 0]
            assert_close(lp, h["positional_scores"], rtol=1e-5, atol=1e-5)


def test_keys_only_with_csan2d_fused_equals_explicit():
    args = make_args("csan2d,relpos", relpos_k=1, relpos_mode="k", csan_layers="0",
                     csan_window=3, csan_heads=3)
    fused = make_attention(args, backend="fused").eval()
    randomize_tables(fused)
    explicit = make_attention(args, backend="explicit").eval()
    explicit.load_state_dict(fused.state_dict())
    x, kpm = padded_batch([6, 3])
    yf, _ = fused(x, x, x, key_padding_mask=kpm, need_weights=False)
    ye, _ = explicit(x, x, x, key_padding_mask=kpm, need_weights=False)
    for a, b in zip(real_rows(yf, kpm), real_rows(ye, kpm)):
        assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_each_table_is_registered_once():
    """The flex path's reference to the piece is not a second registration of its tables."""
    attn = make_attention(make_args("relpos", relpos_k=2), backend="flex")
    names = [n for n, _ in attn.named_parameters(remove_duplicate=False)]
    assert [n for n in names if "rel_" in n] == ["pieces.0.rel_keys", "pieces.0.rel_values"]
    assert attn._flex_piece is attn.pieces[0]


def test_checkpoint_with_tables_registered_twice_loads_and_translates_unchanged():
    """tests/data/relpos_checkpoint was written when each table was saved twice; it loads
    (each table once, from the checkpoint) and computes what that code computed."""
    import json
    import os

    import relpos_fixture

    saved = torch.load(os.path.join(relpos_fixture.FIXTURE, "checkpoint.pt"), weights_only=False)["model"]
    assert any("_flex_piece.rel_keys" in k for k in saved)  # the fixture is the old layout
    model, task = relpos_fixture.load()
    state = model.state_dict()
    assert not any("_flex_piece" in k for k in state)
    tables = [k for k in state if "rel_" in k]
    assert len(tables) == 6  # (keys, values) x 3 layers
    for k in tables:
        assert_close(state[k], saved[k], rtol=0, atol=0)
    with open(os.path.join(relpos_fixture.FIXTURE, "outputs.json"), encoding="utf-8") as f:
        want = json.load(f)
    got = relpos_fixture.outputs(model, task)
    assert got["hypotheses"] == want["hypotheses"]
    for g, w in zip(got["log_probs"], want["log_probs"]):
        assert_close(torch.tensor(g), torch.tensor(w), rtol=0, atol=1e-5)
