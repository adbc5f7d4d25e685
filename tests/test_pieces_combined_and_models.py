"""temp / dpi / chained / convattn together: one layer against a loop reference,
csan2d combinations, and whole transformer_attn models built from the architectures."""

import argparse
from types import SimpleNamespace

import pytest
import torch
from fairseq.models import ARCH_CONFIG_REGISTRY

from attn_helpers import assert_decoder_steps_equal_full, make_args, make_attention, output64, padded_batch, projections64, toy_dictionary
from fairseq_attn_core import PIECES
from fairseq_attn_core.pieces.dpi import SAN_P
from fairseq_attn_plugins.models.transformer_attn import AttnTransformerModel
from piece_refs import (
    assert_padding_invariant,
    loop_chain64,
    loop_conv2d_attention,
    loop_probs64,
    sentence_positions,
)

MINE = ("temp", "dpi", "chained", "convattn1d", "convattn2d")


def test_five_pieces_in_one_layer_match_loop_reference():
    """temp + dpi + csan1d + convattn2d + chained: q/k/v scaling, position tables and
    window on the logits, the convolution on the probabilities, then the chain."""
    args = make_args("temp,dpi,csan1d,convattn2d,chained", temp_layers="0", dpi_layers="0",
                     dpi_max_len=6, max_source_positions=6, csan_layers="0", csan_window=3, convattn_layers="0",
                     chained_layers="0", chained_k=2)
    attn = make_attention(args).double()
    temp, dpi, _, conv, chain = attn.pieces
    with torch.no_grad():
        temp.tau_q.copy_(torch.tensor([0.5, 1.5, 2.0, -1.0]))
        temp.tau_v.copy_(torch.tensor([0.7, -0.4, 1.1, 3.0]))
    x, kpm = padded_batch([5, 3], dtype=torch.float64)
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)

    q, k, v = projections64(attn, x)
    for h in range(4):
        q[:, h] *= float(temp.tau_q[h])
        k[:, h] *= float(temp.tau_k[h])
        v[:, h] *= float(temp.tau_v[h])
    pos = [sentence_positions(kpm[b]) for b in range(2)]

    def bias(b, h, i, j):
        if abs(i - j) > 1:  # csan1d window of 3
            return float("-inf")
        pi, pj = pos[b][i], pos[b][j]
        return float(dpi.absolute[h, pi, pj]) + float(dpi.relative[h, pi - pj + 5])

    probs = loop_probs64(q, k, kpm, bias)
    probs = loop_conv2d_attention(probs, kpm, conv.weight.double(), conv.bias.double(), 3)
    ref = output64(attn, loop_chain64(probs, v, 2, chain.w_attn.weight.double()))
    real = ~kpm.t()
    torch.testing.assert_close(y[real], ref[real], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("pieces", ["temp,csan2d", "dpi,csan2d", "temp,dpi,csan2d"])
def test_fused_pieces_combine_with_csan2d(pieces):
    flags = dict(max_source_positions=8, csan_layers="0", csan_window=3, csan_heads=3)
    if "temp" in pieces:  # only the active pieces' flags: the core refuses another piece's
        flags.update(temp_layers="0")
    if "dpi" in pieces:
        flags.update(dpi_layers="0", dpi_max_len=8)
    x, kpm = padded_batch([5, 3])
    fused = make_attention(make_args(pieces, **flags), backend="fused")
    explicit = make_attention(make_args(pieces, **flags), backend="explicit")
    for p in fused.pieces + explicit.pieces:  # move off the neutral temperature
        if p.name == "temp":
            with torch.no_grad():
                p.tau_k.copy_(torch.tensor([0.5, 2.0, 1.0, -1.5]))
    yf, _ = fused(x, x, x, key_padding_mask=kpm, need_weights=False)
    ye, _ = explicit(x, x, x, key_padding_mask=kpm, need_weights=False)
    real = ~kpm.t()
    torch.testing.assert_close(yf[real], ye[real], rtol=1e-5, atol=1e-5)
    assert_padding_invariant(explicit, [5, 2, 4])
    base = make_attention(make_args("csan2d", max_source_positions=8, csan_layers="0", csan_window=3, csan_heads=3))
    yb, _ = base(x, x, x, key_padding_mask=kpm)
    assert float((yb[real] - ye[real]).abs().max()) > 1e-4  # the pieces do something


def tiny_model(arch, **flags):
    settings = dict(
        arch=arch, encoder_layers=2, decoder_layers=2, encoder_embed_dim=16, decoder_embed_dim=16,
        encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=4,
        decoder_attention_heads=4, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        max_source_positions=16, max_target_positions=16,
    )
    settings.update(flags)
    args = argparse.Namespace(**settings)
    ARCH_CONFIG_REGISTRY[arch](args)
    d = toy_dictionary()
    task = SimpleNamespace(source_dictionary=d, target_dictionary=d)
    torch.manual_seed(0)
    return AttnTransformerModel.build_model(args, task).eval(), d


@pytest.mark.parametrize("name", MINE)
def test_architectures_build_train_and_decode(name):
    assert name in PIECES
    for suffix in ("wmt_en_de", "vaswani_wmt_en_de_big"):
        assert f"transformer_{name}_{suffix}" in ARCH_CONFIG_REGISTRY
    flags = {k: v for k, v in PIECES[name].test_flags.items()}
    model, d = tiny_model(f"transformer_{name}_wmt_en_de", **flags)
    layer0 = model.encoder.layers[0].self_attn
    assert [p.name for p in layer0.pieces] == [name]
    src = torch.tensor([[d.pad(), 5, 6, 7, d.eos()], [8, 9, 10, 11, d.eos()]])
    lengths = torch.tensor([4, 5])
    prev = torch.tensor([[d.eos(), 12, 13, 14], [d.eos(), 15, 16, 17]])
    model.train()
    out, _ = model(src, lengths, prev)
    out.float().pow(2).mean().backward()
    for pname, p in layer0.pieces[0].named_parameters():
        assert p.grad is not None and float(p.grad.abs().sum()) > 0, pname
    # incremental decoding equals the full decoder forward (decoder-side pieces included)
    model.eval()
    assert_decoder_steps_equal_full(model, src, lengths, prev, rtol=1e-4, atol=1e-4)
    if name in ("temp", "dpi"):
        assert model.decoder.layers[0].self_attn.pieces, "test_flags put it on the decoder too"


def test_san_p_without_token_position_embeddings():
    """SAN+P: --dpi-mode p with fairseq's --no-token-positional-embeddings. Without
    positions the encoder cannot tell word order; the position table gives it back."""
    src = torch.tensor([[5, 6, 7, 8, 2]])
    swapped = torch.tensor([[7, 6, 5, 8, 2]])
    lengths = torch.tensor([5])

    def encode(model, tokens):
        return model.encoder(tokens, src_lengths=lengths)["encoder_out"][0][:, 0]  # (T, C)

    sanp = argparse.Namespace(**SAN_P)
    assert vars(sanp) == dict(no_token_positional_embeddings=True, dpi_mode="p", dpi_sides="both")
    flags = dict(vars(sanp), dpi_max_len=16)
    for arch, order_blind in (("transformer_attn_wmt_en_de", True), ("transformer_dpi_wmt_en_de", False)):
        # dpi's flags are refused where dpi is not active: the baseline gets the shared flag only
        model, _ = tiny_model(arch, **(flags if "dpi" in arch else dict(no_token_positional_embeddings=True)))
        a, b = encode(model, src), encode(model, swapped)
        # token 6 sits at position 1 in both orders; tokens 5 and 7 swap places
        diff = max(float((a[1] - b[1]).abs().max()), float((a[0] - b[2]).abs().max()))
        if order_blind:
            assert diff < 1e-5, arch
        else:
            assert diff > 1e-3, arch
