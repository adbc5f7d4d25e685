"""Shared builders of the locality-baseline piece tests (localsoft, localhard, neighbor,
block, cnns; Table 1 of Yang et al. 2019): float64 loop references, tiny and base-size
models, the parameter deltas and the train/resume check (not a test module)."""

import argparse
import functools
import re
from types import SimpleNamespace

import pytest
import torch
from fairseq.models import ARCH_CONFIG_REGISTRY
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, output64, padded_batch, projections64, toy_dictionary
from fairseq_attn_plugins.models.transformer_attn import AttnTransformerModel
from piece_refs import loop_apply64, loop_probs64

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


@functools.lru_cache(maxsize=1)
def baseline_params():
    return base_size_params("transformer_attn_wmt_en_de")


def check_parameter_deltas(piece):
    """The piece's rows of TABLE1: delta over the baseline == formula, and whether it rounds
    to the paper's +xM (run with ``-s`` to print them)."""
    baseline = baseline_params()
    print(f"\n{'piece':<10} {'flags':<58} {'delta':>12} {'ours':>7} {'paper':>7}")
    for name, flags, formula, paper, matches in [row for row in TABLE1 if row[0] == piece]:
        delta = base_size_params(f"transformer_{name}_wmt_en_de", **flags) - baseline
        print(f"{name:<10} {str(flags):<58} {delta:>12,} {delta / 1e6:>+6.1f}M {paper:>+6.1f}M")
        assert delta == formula, (name, flags)
        assert (round(delta / 1e6, 1) == paper) == matches, (name, flags, delta)
        assert delta > 0


def check_lower_layers_of_the_encoder_only(name):
    layers = "all" if name == "block" else "0-2"
    args = make_args(name, layers=6)
    assert getattr(args, f"{name}_layers") == layers
    expected = range(6) if name == "block" else range(3)
    for i in range(6):
        assert bool(make_attention(args, layer_idx=i).pieces) == (i in expected), i
        assert not make_attention(args, side="decoder", layer_idx=i).pieces


def check_incremental_decoding_is_refused(name, flags):
    attn = make_attention(make_args(name, **flags))
    x, _ = padded_batch([3])
    with pytest.raises(RuntimeError, match=f"{name}: incremental decoding is not supported"):
        attn(x[:1], x[:1], x[:1], incremental_state={})


def make_data_dir():
    """The toy corpus binarised once per test run (read only), shared by every piece's file."""
    from cli_helpers import shared_data

    return shared_data()


def check_train_resume(name, data_dir, tmp_path, caplog):
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
