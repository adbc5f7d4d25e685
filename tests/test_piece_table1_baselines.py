"""The Table 1 baselines of Yang et al. 2019 (CSAN): localsoft, localhard, neighbor,
block, cnns. Float64 loop references (left and right padding, fused and explicit),
flag errors, the encoder-only refusals, and the parameter deltas at base size."""

import argparse
import math
import re
from types import SimpleNamespace

import pytest
import torch
from fairseq.models import ARCH_CONFIG_REGISTRY
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, output64, padded_batch, projections64, toy_dictionary
from fairseq_attn_plugins.attention import PieceConfigError
from fairseq_attn_plugins.models.transformer_attn import AttnTransformerModel
from piece_refs import loop_apply64, loop_probs64, sentence_positions

LENGTHS = [6, 3, 5]


def attention(pieces, backend="explicit", **flags):
    return make_attention(make_args(pieces, **flags), backend=backend).double().eval()


def predictor64(pred, q, b, i):
    """sigmoid(W2 tanh(W1 Qf + b1) + b2) for query i of sentence b; Qf = heads concatenated."""
    qf = torch.cat([q[b, h, i] for h in range(q.size(1))])
    hid = torch.tanh(pred.hidden.weight.double() @ qf + pred.hidden.bias.double())
    return torch.sigmoid(pred.out.weight.double() @ hid + pred.out.bias.double())


def check_bias_piece(attn, bias_of):
    """The layer's output equals softmax(q k / sqrt(d) + bias) v written as loops,
    for left and right padding; ``bias_of(q, kpm)`` returns bias(b, h, i, j)."""
    for left in (True, False):
        x, kpm = padded_batch(LENGTHS, left_pad=left, dtype=torch.float64)
        y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
        q, k, v = projections64(attn, x)
        ref = output64(attn, loop_apply64(loop_probs64(q, k, kpm, bias_of(q, kpm)), v))
        real = ~kpm.t()
        assert_close(y[real], ref[real])


# ---------------------------------------------------------------- localsoft
@pytest.mark.parametrize("backend", ["explicit", "fused"])
def test_localsoft_matches_loop_reference(backend):
    attn = attention("localsoft", backend, localsoft_layers="0")
    pred = attn.pieces[0].predictor
    H = attn.num_heads

    def bias_of(q, kpm):
        def bias(b, h, i, j):
            pos = sentence_positions(kpm[b])
            n = sum(p >= 0 for p in pos)
            y = predictor64(pred, q, b, i)
            centre = float(y[h]) * (n - 1)
            width = float(y[H + h]) * n + 0.1
            return -2.0 * (centre - pos[j]) ** 2 / width ** 2
        return bias

    check_bias_piece(attn, bias_of)


# ---------------------------------------------------------------- localhard
@pytest.mark.parametrize("backend", ["explicit", "fused"])
def test_localhard_matches_loop_reference(backend):
    attn = attention("localhard", backend, localhard_layers="0", localhard_heads=3, localhard_window=3.0)
    pred = attn.pieces[0].predictor
    H, n_l = attn.num_heads, 3

    def bias_of(q, kpm):
        def bias(b, h, i, j):
            if h < H - n_l:  # the first H - n_l heads are not localized
                return 0.0
            pos = sentence_positions(kpm[b])
            n = sum(p >= 0 for p in pos)
            centre = float(predictor64(pred, q, b, i)[h - (H - n_l)]) * (n - 1)
            return -2.0 * (centre - pos[j]) ** 2 / 3.0 ** 2
        return bias

    check_bias_piece(attn, bias_of)


# ---------------------------------------------------------------- neighbor
@pytest.mark.parametrize("std_param", ["square", "plain"])
@pytest.mark.parametrize("backend", ["explicit", "fused"])
def test_neighbor_soft_matches_loop_reference(std_param, backend):
    attn = attention("neighbor", backend, neighbor_layers="0", neighbor_init_std=2.0,
                     neighbor_std_param=std_param)
    piece = attn.pieces[0]
    with torch.no_grad():
        piece.sigma.copy_(torch.tensor([0.7, 1.3, 2.0, 3.1]))  # a different std per head

    def bias_of(q, kpm):
        def bias(b, h, i, j):
            s = float(piece.sigma[h]) ** 2 if std_param == "square" else float(piece.sigma[h])
            pos = sentence_positions(kpm[b])
            return -((pos[i] - pos[j]) ** 2) / (2 * s ** 2)
        return bias

    check_bias_piece(attn, bias_of)


def test_neighbor_initial_std():
    for std_param in ("square", "plain"):
        piece = attention("neighbor", neighbor_layers="0", neighbor_init_std=5.0,
                          neighbor_std_param=std_param).pieces[0]
        assert_close(piece.std(), torch.full((4,), 5.0, dtype=torch.float64))


@pytest.mark.parametrize("backend", ["explicit", "fused"])
def test_neighbor_predicted_matches_loop_reference(backend):
    attn = attention("neighbor", backend, neighbor_layers="0", neighbor_mode="predicted", neighbor_heads=2)
    pred = attn.pieces[0].predictor
    H, n_l = attn.num_heads, 2

    def bias_of(q, kpm):
        def bias(b, h, i, j):
            if h < H - n_l:
                return 0.0
            pos = sentence_positions(kpm[b])
            n = sum(p >= 0 for p in pos)
            width = float(predictor64(pred, q, b, i)[h - (H - n_l)]) * n + 0.1
            return -2.0 * (pos[i] - pos[j]) ** 2 / width ** 2
        return bias

    check_bias_piece(attn, bias_of)


# ---------------------------------------------------------------- block
def block_reference(attn, x, kpm, bs):
    """Block self-attention written out per sentence, block and head (float64)."""
    piece = attn.pieces[0]
    B, H, D = x.size(1), attn.num_heads, attn.head_dim
    q, k, v = projections64(attn, x)
    blocks = []  # blocks[b] = list of lists of indices
    for b in range(B):
        real = [t for t in range(x.size(0)) if not kpm[b, t]]
        blocks.append([real[s:s + bs] for s in range(0, len(real), bs)])

    def same_block(b, h, i, j):
        return 0.0 if any(i in blk and j in blk for blk in blocks[b]) else float("-inf")

    r = loop_apply64(loop_probs64(q, k, kpm, same_block), v)  # (B, H, T, D) intra-block
    W = {name: (getattr(piece, name).weight.double(), getattr(piece, name).bias)
         for name in ("s2t_hidden", "s2t_logits", "inter_query", "gate", "context_proj")}

    def lin(name, vec):
        w, bias = W[name]
        return w @ vec + (bias.double() if bias is not None else 0.0)

    y = output64(attn, r)  # W_o r + b_o
    for b in range(B):
        r_cat = {t: torch.cat([r[b, h, t] for h in range(H)]) for blk in blocks[b] for t in blk}
        vbar = []  # per block: (H, D)
        for blk in blocks[b]:
            logits = {t: lin("s2t_logits", torch.sigmoid(lin("s2t_hidden", r_cat[t]))) for t in blk}
            summary = torch.zeros(H, D, dtype=torch.float64)
            for h in range(H):
                z = sum(math.exp(float(logits[t][h])) for t in blk)
                for t in blk:
                    summary[h] += math.exp(float(logits[t][h])) / z * r[b, h, t]
            vbar.append(summary)
        for m, blk in enumerate(blocks[b]):
            u = lin("inter_query", vbar[m].reshape(-1)).view(H, D)
            o = torch.zeros(H, D, dtype=torch.float64)
            for h in range(H):
                s = [float(u[h] @ vbar[n][h]) / math.sqrt(D) for n in range(len(blocks[b]))]
                z = sum(math.exp(si) for si in s)
                for n in range(len(blocks[b])):
                    o[h] += math.exp(s[n]) / z * vbar[n][h]
            g = torch.sigmoid(lin("gate", torch.cat([vbar[m].reshape(-1), o.reshape(-1)])))
            e = g * o.reshape(-1) + (1 - g) * vbar[m].reshape(-1)
            for t in blk:
                y[t, b] += lin("context_proj", e)
    return y


@pytest.mark.parametrize("bs", [1, 2, 3])
@pytest.mark.parametrize("backend", ["explicit", "fused"])
def test_block_matches_loop_reference(bs, backend):
    attn = attention("block", backend, block_layers="0", block_size=bs)
    with torch.no_grad():  # non-zero biases, so that they are checked too
        for name, p in attn.pieces[0].named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.3)
    for left in (True, False):
        x, kpm = padded_batch(LENGTHS, left_pad=left, dtype=torch.float64)
        y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
        real = ~kpm.t()
        assert_close(y[real], block_reference(attn, x, kpm, bs)[real])


def test_block_size_one_block_covering_the_sentence_is_plain_attention_plus_context():
    """With one block covering the sentence, the intra-block output is plain attention:
    only the context term W_e e differs from the baseline layer."""
    attn = attention("block", block_layers="0", block_size=8)
    base = attention("")
    base.load_state_dict({k: v for k, v in attn.state_dict().items() if "pieces" not in k})
    x, kpm = padded_batch(LENGTHS, dtype=torch.float64)
    with torch.no_grad():
        attn.pieces[0].context_proj.weight.zero_()
    y, _ = attn(x, x, x, key_padding_mask=kpm)
    y0, _ = base(x, x, x, key_padding_mask=kpm)
    real = ~kpm.t()
    assert_close(y[real], y0[real])


# ---------------------------------------------------------------- cnns
def layer_norm64(vec, norm):
    mean = sum(float(t) for t in vec) / len(vec)
    var = sum((float(t) - mean) ** 2 for t in vec) / len(vec)
    return torch.tensor([(float(t) - mean) / math.sqrt(var + norm.eps) * float(w) + float(bb)
                         for t, w, bb in zip(vec, norm.weight, norm.bias)], dtype=torch.float64)


def cnns_reference(piece, sent):
    """The conv sublayers on one sentence (n, C) alone, written as loops."""
    x = sent.double().clone()
    n, C = x.shape
    for conv in piece.convs:
        y = torch.stack([layer_norm64(x[t], conv.norm) for t in range(n)])
        out = torch.zeros(n, C, dtype=torch.float64)
        for t in range(n):
            for c in range(C):
                if conv.depthwise is not None:
                    kernel = conv.depthwise.kernel_size[0]
                    # depthwise, then pointwise
                    s = float(conv.pointwise.bias[c])
                    for c2 in range(C):
                        dw = 0.0
                        for r in range(kernel):
                            tt = t + r - kernel // 2
                            if 0 <= tt < n:
                                dw += float(conv.depthwise.weight[c2, 0, r]) * float(y[tt, c2])
                        s += float(conv.pointwise.weight[c, c2, 0]) * dw
                else:
                    kernel = conv.pointwise.kernel_size[0]
                    s = float(conv.pointwise.bias[c])
                    for c2 in range(C):
                        for r in range(kernel):
                            tt = t + r - kernel // 2
                            if 0 <= tt < n:
                                s += float(conv.pointwise.weight[c, c2, r]) * float(y[tt, c2])
                out[t, c] = max(s, 0.0)
        x = x + out
    return x


@pytest.mark.parametrize("kind", ["separable", "full"])
def test_cnns_layer_input_matches_loop_reference(kind):
    attn = attention("cnns", cnns_layers="0", cnns_convs=2, cnns_kernel=3, cnns_conv=kind)
    piece = attn.pieces[0]
    with torch.no_grad():
        for conv in piece.convs:
            conv.norm.weight.normal_(1, 0.2)
    for left in (True, False):
        x, kpm = padded_batch(LENGTHS, left_pad=left, dtype=torch.float64)
        y = attn.layer_input(x, kpm)
        for b in range(len(LENGTHS)):
            real = ~kpm[b]
            assert_close(y[real, b], cnns_reference(piece, x[real, b]))


def test_cnns_leaves_the_attention_unchanged():
    attn = attention("cnns", cnns_layers="0")
    base = attention("")
    base.load_state_dict({k: v for k, v in attn.state_dict().items() if "pieces" not in k})
    x, kpm = padded_batch(LENGTHS, dtype=torch.float64)
    assert_close(attn(x, x, x, key_padding_mask=kpm)[0], base(x, x, x, key_padding_mask=kpm)[0])


def test_cnns_runs_before_the_encoder_layer_in_the_model():
    """A model whose conv sublayers are zeroed (ReLU(0) = 0) equals the baseline; with them
    it differs only in the encoder."""
    model, d = tiny_model("transformer_cnns_wmt_en_de", cnns_layers="0", cnns_convs=1, cnns_kernel=3)
    base, _ = tiny_model("transformer_attn_wmt_en_de")
    base.load_state_dict({k: v for k, v in model.state_dict().items() if "pieces" not in k})
    src = torch.tensor([[d.pad(), 5, 6, 7, d.eos()], [8, 9, 10, 11, d.eos()]])
    lengths = torch.tensor([4, 5])
    enc = model.encoder(src, src_lengths=lengths)["encoder_out"][0]
    enc0 = base.encoder(src, src_lengths=lengths)["encoder_out"][0]
    assert (enc - enc0).abs().max() > 1e-3
    with torch.no_grad():
        for conv in model.encoder.layers[0].self_attn.pieces[0].convs:
            conv.pointwise.weight.zero_()
            conv.pointwise.bias.zero_()
    assert_close(model.encoder(src, src_lengths=lengths)["encoder_out"][0], enc0)


# ---------------------------------------------------------------- shared
@pytest.mark.parametrize("name", ["localsoft", "localhard", "neighbor", "block", "cnns"])
def test_lower_layers_of_the_encoder_only(name):
    layers = "all" if name == "block" else "0-2"
    args = make_args(name, layers=6)
    assert getattr(args, f"{name}_layers") == layers
    expected = range(6) if name == "block" else range(3)
    for i in range(6):
        assert bool(make_attention(args, layer_idx=i).pieces) == (i in expected), i
        assert not make_attention(args, side="decoder", layer_idx=i).pieces


@pytest.mark.parametrize("name, flags", [
    ("localsoft", dict(localsoft_layers="0")),
    ("localhard", dict(localhard_layers="0", localhard_heads=2)),
    ("neighbor", dict(neighbor_layers="0")),
    ("block", dict(block_layers="0")),
])
def test_incremental_decoding_is_refused(name, flags):
    attn = make_attention(make_args(name, **flags))
    x, _ = padded_batch([3])
    with pytest.raises(RuntimeError, match=f"{name}: incremental decoding is not supported"):
        attn(x[:1], x[:1], x[:1], incremental_state={})


def test_decoder_layer_refuses_layer_input_pieces():
    from fairseq.models.transformer import TransformerConfig

    from fairseq_attn_plugins.models.transformer_attn import PluginDecoderLayer

    args = make_args("cnns", cnns_layers="0")
    args.encoder_embed_dim = args.decoder_embed_dim = 16
    args.decoder_ffn_embed_dim = 32
    cfg = TransformerConfig.from_namespace(args)
    original = args.cnns_layers
    # cnns is encoder-only by construction; force it onto a decoder site to check the guard
    from fairseq_attn_plugins.attention.pieces.cnns import ConvSublayers

    saved = ConvSublayers.build
    ConvSublayers.build = classmethod(lambda cls, a, site: cls(site, a))
    try:
        with pytest.raises(PieceConfigError, match=r"\['cnns'\].*only encoder layers"):
            PluginDecoderLayer(cfg, args, 0)
    finally:
        ConvSublayers.build = saved
    assert args.cnns_layers == original


@pytest.mark.parametrize("name, flags, flag", [
    ("localsoft", dict(localsoft_layers="6"), "--localsoft-layers"),
    ("localhard", dict(localhard_heads=5), "--localhard-heads"),
    ("localhard", dict(localhard_heads=0), "--localhard-heads"),
    ("localhard", dict(localhard_window=0.0), "--localhard-window"),
    ("localhard", dict(localhard_window="ten"), "--localhard-window"),
    ("neighbor", dict(neighbor_mode="hard"), "--neighbor-mode"),
    ("neighbor", dict(neighbor_init_std=-1.0), "--neighbor-init-std"),
    ("neighbor", dict(neighbor_init_std=float("inf")), "--neighbor-init-std"),
    ("neighbor", dict(neighbor_std_param="log"), "--neighbor-std-param"),
    ("neighbor", dict(neighbor_heads=9), "--neighbor-heads"),
    ("block", dict(block_size=0), "--block-size"),
    ("block", dict(block_layers="0-9"), "--block-layers"),
    ("cnns", dict(cnns_kernel=4), "--cnns-kernel"),
    ("cnns", dict(cnns_convs=0), "--cnns-convs"),
    ("cnns", dict(cnns_conv="dilated"), "--cnns-conv"),
])
def test_bad_flags_name_the_flag(name, flags, flag):
    with pytest.raises(PieceConfigError, match=flag):
        make_args(name, **flags)


# ---------------------------------------------------------------- parameter counts
def tiny_model(arch, **flags):
    settings = dict(arch=arch, encoder_layers=2, decoder_layers=2, encoder_embed_dim=16,
                    decoder_embed_dim=16, encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32,
                    encoder_attention_heads=4, decoder_attention_heads=4, dropout=0.0,
                    attention_dropout=0.0, activation_dropout=0.0)
    settings.update(flags)
    return build(arch, settings)


def build(arch, settings):
    args = argparse.Namespace(**settings)
    ARCH_CONFIG_REGISTRY[arch](args)
    d = toy_dictionary()
    torch.manual_seed(0)
    task = SimpleNamespace(source_dictionary=d, target_dictionary=d)
    return AttnTransformerModel.build_model(args, task).eval(), d


def base_size_params(arch, **flags):
    model, _ = build(arch, dict(arch=arch, **flags))
    return sum(p.numel() for p in model.parameters())


C, H, D, L3, L6 = 512, 8, 64, 3, 6


def predictor(n_out, hidden):
    return C * hidden + hidden + hidden * n_out + n_out


# piece, flags, formula of the delta, the paper's +xM (Table 1), whether ours rounds to it
TABLE1 = [
    ("localsoft", {}, L3 * predictor(2 * H, C), 0.8, True),
    ("localhard", {}, L3 * predictor(4, 4 * D), 0.4, True),
    ("neighbor", {}, L3 * H, 0.4, False),
    ("neighbor", {"neighbor_mode": "predicted"}, L3 * predictor(4, 4 * D), 0.4, True),
    ("block", {}, L6 * (5 * C * C + 3 * C + C * H + H), 6.0, False),
    ("block", {"block_layers": "0-2"}, L3 * (5 * C * C + 3 * C + C * H + H), 6.0, False),
    ("cnns", {}, L3 * 4 * (7 * C + C * C + C + 2 * C), 42.6, False),
    ("cnns", {"cnns_conv": "full", "cnns_kernel": 3, "cnns_convs": 18},
     L3 * 18 * (3 * C * C + C + 2 * C), 42.6, True),
]


def test_parameter_deltas_at_base_size_match_the_formulas():
    baseline = base_size_params("transformer_attn_wmt_en_de")
    print(f"\n{'piece':<10} {'flags':<58} {'delta':>12} {'ours':>7} {'paper':>7}")
    for name, flags, formula, paper, matches in TABLE1:
        delta = base_size_params(f"transformer_{name}_wmt_en_de", **flags) - baseline
        print(f"{name:<10} {str(flags):<58} {delta:>12,} {delta / 1e6:>+6.1f}M {paper:>+6.1f}M")
        assert delta == formula, (name, flags)
        assert (round(delta / 1e6, 1) == paper) == matches, (name, flags, delta)
    assert TABLE1[0][2] == 812_592 and TABLE1[1][2] == 397_068 and TABLE1[7][2] == 42_550_272


# ---------------------------------------------------------------- train, generate, resume
@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    from cli_helpers import make_data

    return make_data(str(tmp_path_factory.mktemp("data")))


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["localsoft", "localhard", "neighbor", "block", "cnns"])
def test_train_resume_through_user_dir(name, data_dir, tmp_path, caplog):
    """Every Table 1 architecture resumes from checkpoint_last.pt (its pieces' weights
    restored) after fairseq-train stopped; generation is covered by test_e2e_cli."""
    import logging

    from cli_helpers import PLUGIN_DIR, TINY, TRAIN, train_in_process

    save = str(tmp_path / "ck")
    base = [data_dir, "--user-dir", PLUGIN_DIR, "--arch", f"transformer_{name}_wmt_en_de", *TINY, *TRAIN,
            "--save-dir", save]
    train_in_process(base + ["--max-update", "2"])
    first = torch.load(f"{save}/checkpoint_last.pt", weights_only=False)["model"]
    assert any(".pieces." in k for k in first), "the piece's weights are in the checkpoint"
    with caplog.at_level(logging.INFO):
        train_in_process(base + ["--max-update", "3"])
    assert any(re.search(r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 2 updates\)", r.getMessage())
               for r in caplog.records)
    assert torch.load(f"{save}/checkpoint_last.pt", weights_only=False)["optimizer_history"][-1]["num_updates"] == 3


def test_gaussian_bias_is_floored_and_stays_finite_in_fp16():
    from fairseq_attn_plugins.attention.localness import BIAS_FLOOR, gaussian_bias

    centre = torch.tensor([[[0.0]]])  # (1, T=1, n=1)
    width = torch.tensor([[[0.1]]])
    pos_k = torch.tensor([[0, 1, 200]])
    bias = gaussian_bias(centre, width, pos_k)  # (1, 1, 1, 3)
    assert_close(bias[0, 0, 0, :2], torch.tensor([0.0, -200.0]))
    assert float(bias[0, 0, 0, 2]) == BIAS_FLOOR  # -2 * 200^2 / 0.01 = -8e6 without the floor
    assert torch.isfinite(bias.half()).all()
