"""Pre-norm (fairseq's --encoder-normalize-before --decoder-normalize-before, the CSAN
authors' THUMT setting) with every architecture: one training update, then beam search
whose scores equal the full forward's; where cnns' convolution sublayers and block's gate
sit in a pre-norm layer, against the layer written out by hand."""

import pytest
import torch
import torch.nn.functional as F
from fairseq.sequence_generator import SequenceGenerator
from torch.testing import assert_close

from reliability_helpers import arch_pieces, arch_test_flags, batch, build_model, dictionary, nll, plugin_archs

PRE_NORM = ["--encoder-normalize-before", "--decoder-normalize-before"]


def pre_norm_model(arch, extra=None):
    torch.manual_seed(0)
    model, args, task = build_model(arch, {**arch_test_flags(arch), **(extra or {})}, cli_extra=PRE_NORM)
    return model, task


@pytest.mark.parametrize("arch", plugin_archs())
def test_every_architecture_trains_and_decodes_pre_norm(arch):
    d = dictionary()
    model, task = pre_norm_model(arch, {"dropout": 0.1})
    assert model.encoder.layer_norm is not None and model.decoder.layer_norm is not None
    assert all(layer.normalize_before for layer in [*model.encoder.layers, *model.decoder.layers])
    if arch_pieces(arch):
        assert any(len(getattr(m, "pieces", ())) for m in model.modules()), f"{arch}: no piece active"
    # one update
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    src, lengths, prev, tgt = batch(d, lengths=(7, 2, 5))
    before = [p.detach().clone() for p in model.parameters()]
    loss = nll(model, d, src, lengths, prev, tgt)
    assert torch.isfinite(loss)
    opt.zero_grad()
    loss.backward()
    opt.step()
    changed = sum(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    assert changed == len(before), f"{arch}: {len(before) - changed} parameters did not train"
    # decode with it: beam 2, cached decoding; every hypothesis's per-token scores equal the
    # full (uncached) forward of its tokens
    model.eval()
    gen = SequenceGenerator([model], d, beam_size=2, max_len_b=6)
    with torch.no_grad():
        hyps = gen.forward({"net_input": {"src_tokens": src, "src_lengths": lengths}})
        for b, beams in enumerate(hyps):
            toks = beams[0]["tokens"][None]
            prev_b = torch.cat([toks.new_full((1, 1), d.eos()), toks[:, :-1]], 1)
            n = int(lengths[b])
            src_b = src[b:b + 1, src.size(1) - n:]  # this sentence alone, unpadded
            out = model(src_b, lengths[b:b + 1], prev_b)
            lp = model.get_normalized_probs(out, log_probs=True)[0]
            want = lp.gather(-1, toks[0][:, None])[:, 0]
            assert_close(beams[0]["positional_scores"], want, rtol=0, atol=1e-5)


def _ffn_sublayer(layer, x):
    h = layer.final_layer_norm(x)
    return x + layer.fc2(F.relu(layer.fc1(h)))


def _attn_sublayer_pre_norm(layer, x, pad):
    h = layer.self_attn_layer_norm(x)
    return x + layer.self_attn(h, h, h, key_padding_mask=pad, need_weights=False)[0]


def test_cnns_convolutions_sit_on_the_residual_stream_before_the_pre_norm_attention():
    """Pre-norm cnns layer = QANet convolution sublayers (each with its own LayerNorm) on the
    layer input x, then x + Attn(LN(x)), then x + FFN(LN(x))."""
    model, _ = pre_norm_model("transformer_cnns_wmt_en_de")
    model.eval()
    layer = model.encoder.layers[0]
    (piece,) = layer.self_attn.pieces
    torch.manual_seed(1)
    T, B, C = 5, 2, model.encoder.embed_tokens.embedding_dim
    x = torch.randn(T, B, C)
    pad = torch.tensor([[False] * 5, [True, True, False, False, False]])
    with torch.no_grad():
        y = x
        for conv in piece.convs:  # written out: x + ReLU(Conv(LN(x))), pads zeroed before the conv
            h = conv.norm(y).masked_fill(pad.t()[:, :, None], 0.0).permute(1, 2, 0)
            h = conv.pointwise(conv.depthwise(h)) if conv.depthwise is not None else conv.pointwise(h)
            y = y + F.relu(h).permute(2, 0, 1)
        want = _ffn_sublayer(layer, _attn_sublayer_pre_norm(layer, y, pad))
        got = layer(x, pad)
    real = ~pad.t()
    assert_close(got[real], want[real], rtol=1e-5, atol=1e-5)


def test_block_gate_sits_inside_the_pre_norm_attention_sublayer():
    """Pre-norm block layer = x + (W_o r + W_e e)(LN(x)), the gated context e computed from the
    normalised input inside the self-attention sublayer, then the FFN sublayer."""
    model, _ = pre_norm_model("transformer_block_wmt_en_de")
    model.eval()
    layer = model.encoder.layers[0]
    (piece,) = layer.self_attn.pieces
    torch.manual_seed(2)
    T, B, C = 6, 2, model.encoder.embed_tokens.embedding_dim
    x = torch.randn(T, B, C)
    pad = torch.zeros(B, T, dtype=torch.bool)
    with torch.no_grad():
        want = _ffn_sublayer(layer, _attn_sublayer_pre_norm(layer, x, pad))
        got = layer(x, pad)
        # the gate matters: a zero gate (e = vbar) changes the layer's output
        piece.gate.weight.zero_()
        piece.gate.bias.fill_(-30.0)
        gated_off = layer(x, pad)
    assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (got - gated_off).abs().max() > 1e-4
