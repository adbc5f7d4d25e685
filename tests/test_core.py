"""The attention core: parity with fairseq's MultiheadAttention, fused vs
explicit agreement (forward and backward), incremental decoding, padding."""

import pytest
import torch
from fairseq.modules.fairseq_dropout import FairseqDropout
from fairseq.modules.multihead_attention import MultiheadAttention
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, padded_batch, path_name
from fairseq_attn_core import AttentionSite, SelfAttention
from fairseq_attn_plugins.models.self_attention import PluginSelfAttention

CONFIGS = {
    "baseline": dict(pieces=""),
    "csan1d": dict(pieces="csan1d", csan_window=3, csan_layers="0"),
    "csan2d_cut": dict(pieces="csan2d", csan_window=3, csan_layers="0"),
    "csan2d_authors": dict(pieces="csan2d", csan_window=5, csan_layers="0", csan_head_edge="authors"),
}


def stock_twin(attn):
    stock = MultiheadAttention(attn.embed_dim, attn.num_heads, self_attention=True)
    stock.load_state_dict(attn.state_dict())
    return stock.eval()


def test_the_core_and_the_plugin_layer_draw_fairseqs_parameters():
    """The core (no fairseq) and the plugin's layer hold fairseq's MultiheadAttention
    parameters under the same names, drawn alike from the same seed: checkpoints load and a
    seeded run starts from the same weights."""
    site = AttentionSite("encoder", 0, 1, 4, 4)
    torch.manual_seed(3)
    stock = MultiheadAttention(16, 4, dropout=0.1, self_attention=True).state_dict()
    for layer_class in (SelfAttention, PluginSelfAttention):
        torch.manual_seed(3)
        layer = layer_class(16, 4, site, dropout=0.1).state_dict()
        assert list(layer) == list(stock)
        for name, value in stock.items():
            assert_close(layer[name], value, rtol=0, atol=0)


def test_the_plugin_layer_adds_fairseqs_dropout_module_quant_noise_and_upgrade():
    site = AttentionSite("encoder", 0, 1, 4, 4)
    plugin = PluginSelfAttention(16, 4, site, dropout=0.1, q_noise=0.1, qn_block_size=8)
    assert type(plugin.dropout_module) is FairseqDropout and plugin.dropout_module.p == 0.1
    assert plugin.dropout_module.module_name == "PluginSelfAttention"  # --retain-dropout-modules
    assert [len(m._forward_pre_hooks) for m in (plugin.q_proj, plugin.k_proj, plugin.v_proj, plugin.out_proj)] == [1] * 4
    assert [len(m._forward_pre_hooks) for m in (SelfAttention(16, 4, site).q_proj,)] == [0]
    # a checkpoint of fairseq's oldest layout (one in_proj for q, k, v) and an earlier alias
    saved = {f"layer.{k}": v.clone() for k, v in plugin.state_dict().items()}
    old = dict(saved)
    for kind in ("weight", "bias"):
        old[f"layer.in_proj_{kind}"] = torch.cat([old.pop(f"layer.{p}_proj.{kind}") for p in "qkv"])
    old["layer._flex_piece.rel_keys"] = torch.zeros(1)
    plugin.upgrade_state_dict_named(old, "layer")
    assert sorted(old) == sorted(saved)
    for name, value in saved.items():
        assert_close(old[name], value, rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["auto", "fused", "explicit"])
@pytest.mark.parametrize("left_pad", [True, False])
def test_baseline_equals_fairseq_multihead_attention(backend, left_pad):
    attn = make_attention(make_args(""), backend=backend).eval()
    stock = stock_twin(attn)
    x, kpm = padded_batch([6, 3, 5], left_pad=left_pad)
    for need_weights in (False, True):
        ours, w_ours = attn(x, x, x, key_padding_mask=kpm, need_weights=need_weights)
        ref, w_ref = stock(x, x, x, key_padding_mask=kpm, need_weights=need_weights)
        assert_close(ours, ref)
        if need_weights:
            assert_close(w_ours, w_ref)
    # per-head weights through fairseq's explicit path (incremental_state={} forces it)
    _, wh = attn(x, x, x, key_padding_mask=kpm, need_head_weights=True)
    _, wh_ref = stock(x, x, x, key_padding_mask=kpm, need_head_weights=True, incremental_state={})
    assert_close(wh, wh_ref)


def test_baseline_decoder_causal_mask_equals_fairseq():
    attn = make_attention(make_args(""), side="decoder").eval()
    stock = stock_twin(attn)
    x, kpm = padded_batch([6, 4], left_pad=False)
    causal = torch.triu(torch.full((6, 6), float("-inf")), 1)
    ours, _ = attn(x, x, x, key_padding_mask=kpm, attn_mask=causal, need_weights=False)
    ref, _ = stock(x, x, x, key_padding_mask=kpm, attn_mask=causal, need_weights=False)
    assert_close(ours, ref)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("left_pad", [True, False])
def test_fused_and_explicit_agree_forward_and_backward(name, left_pad):
    cfg = dict(CONFIGS[name])
    args = make_args(cfg.pop("pieces"), **cfg)
    fused = make_attention(args, backend="fused").eval()
    explicit = make_attention(args, backend="explicit").eval()
    explicit.load_state_dict(fused.state_dict())
    x, kpm = padded_batch([7, 2, 5], left_pad=left_pad)
    outs, grads = [], []
    for attn in (fused, explicit):
        xi = x.clone().requires_grad_(True)
        out, _ = attn(xi, xi, xi, key_padding_mask=kpm, need_weights=False)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        outs.append(out)
        grads.append([xi.grad] + [p.grad for p in attn.parameters()])
    assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-6)
    for g_fused, g_explicit in zip(*grads):
        assert_close(g_fused, g_explicit, rtol=1e-5, atol=1e-6)


def test_auto_backend_dispatch():
    attn = make_attention(make_args("csan2d", csan_layers="0"))
    assert path_name(attn) == "fused"
    assert path_name(attn, need_weights=True) == "explicit"  # weights need the explicit path
    attn.backend = "explicit"
    assert path_name(attn) == "explicit"


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("left_pad", [True, False])
def test_sentence_output_independent_of_batch_padding(name, left_pad):
    cfg = dict(CONFIGS[name])
    attn = make_attention(make_args(cfg.pop("pieces"), **cfg)).eval()
    x, kpm = padded_batch([8, 3, 5], left_pad=left_pad)
    out, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    for b, n in enumerate([8, 3, 5]):
        rows = slice(8 - n, 8) if left_pad else slice(0, n)
        alone = x[rows, b : b + 1]
        out_alone, _ = attn(alone, alone, alone, key_padding_mask=None, need_weights=False)
        assert_close(out[rows, b : b + 1], out_alone, rtol=1e-5, atol=1e-6)


def test_incremental_decoding_equals_full_forward():
    attn = make_attention(make_args(""), side="decoder").eval()
    stock = stock_twin(attn)
    x, _ = padded_batch([6, 6], left_pad=False)
    causal = torch.triu(torch.full((6, 6), float("-inf")), 1)
    full, _ = attn(x, x, x, attn_mask=causal, need_weights=False)
    state, state_ref = {}, {}
    for t in range(6):
        step = x[t : t + 1]
        out, w = attn(step, step, step, incremental_state=state, need_head_weights=True)
        ref, w_ref = stock(step, step, step, incremental_state=state_ref, need_head_weights=True)
        assert_close(out, full[t : t + 1], rtol=1e-5, atol=1e-6)
        assert_close(out, ref)
        assert_close(w, w_ref)
    # the cache has fairseq's layout, so fairseq's reorder (beam search) works on it
    order = torch.tensor([1, 0])
    attn.reorder_incremental_state(state, order)
    assert_close(attn._get_input_buffer(state)["prev_key"][0], stock._get_input_buffer(state_ref)["prev_key"][1])


@pytest.mark.parametrize(
    "flags, message",
    [
        (dict(pieces="csan1d", csan_window=10), "--csan-window"),
        (dict(pieces="csan1d", csan_window=0), "--csan-window"),
        (dict(pieces="csan2d", csan_heads=5), "--csan-heads"),
        (dict(pieces="csan2d", csan_heads=2), "--csan-heads"),
        (dict(pieces="csan2d", csan_head_edge="mirror"), "--csan-head-edge"),
        (dict(pieces="csan1d", csan_layers="0-6"), "--csan-layers"),
        (dict(pieces="csan1d", csan_layers="first"), "--csan-layers"),
        (dict(pieces="csan1d,csan2d"), "conflict"),
        (dict(pieces="nope"), "--attn-pieces"),
        (dict(pieces="", attn_backend="fast"), "--attn-backend"),
    ],
)
def test_invalid_flags_fail_naming_the_flag(flags, message):
    from fairseq_attn_core import PieceConfigError

    flags = dict(flags)
    with pytest.raises(PieceConfigError, match=message):
        make_args(flags.pop("pieces"), layers=6, heads=4, **flags)


def test_the_cores_default_positions_are_fairseqs():
    """convattn1d and dpi resolve an unset --max-source/target-positions as fairseq does."""
    from fairseq.models.transformer import DEFAULT_MAX_SOURCE_POSITIONS, DEFAULT_MAX_TARGET_POSITIONS

    from fairseq_attn_core.settings import FAIRSEQ_MAX_POSITIONS

    assert FAIRSEQ_MAX_POSITIONS == DEFAULT_MAX_SOURCE_POSITIONS == DEFAULT_MAX_TARGET_POSITIONS
