"""Whole models: the plugin baseline is fairseq's Transformer; CSAN adds no
parameters; padding does not change a sentence's encoder output."""

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from torch.testing import assert_close

from attn_helpers import build_model, token_batch

import fairseq_attn_plugins  # noqa: F401


def encode(model, tokens, lengths):
    return model.encoder(tokens, src_lengths=lengths)["encoder_out"][0]  # (T, B, C)


def translate(model, task, tokens, lengths):
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=4, max_len_b=12)
    sample = {"net_input": {"src_tokens": tokens, "src_lengths": lengths}}
    return gen.forward(sample)


def assert_same_translations(hyps_a, hyps_b):
    for a, b in zip(hyps_a, hyps_b):
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]
        assert_close(torch.stack([h["score"] for h in a]), torch.stack([h["score"] for h in b]))


@pytest.mark.parametrize("direction", ["stock_to_plugin", "plugin_to_stock"])
def test_plugin_baseline_is_stock_transformer(direction):
    stock, task, _ = build_model("transformer_wmt_en_de", seed=1)
    plugin, _, _ = build_model("transformer_attn_wmt_en_de", seed=2)
    src, dst = (stock, plugin) if direction == "stock_to_plugin" else (plugin, stock)
    assert set(src.state_dict()) == set(dst.state_dict())
    dst.load_state_dict(src.state_dict(), strict=True)
    stock.eval(), plugin.eval()
    d = task.source_dictionary
    tokens, lengths = token_batch([9, 4, 7], d)
    with torch.no_grad():
        assert_close(encode(plugin, tokens, lengths), encode(stock, tokens, lengths))
        # teacher-forced decoder outputs (full-sequence path)
        prev = torch.roll(tokens, 1, dims=1)
        assert_close(plugin(tokens, lengths, prev)[0], stock(tokens, lengths, prev)[0])
        # beam search (incremental decoding path)
        assert_same_translations(translate(plugin, task, tokens, lengths),
                                 translate(stock, task, tokens, lengths))


def test_same_seed_same_initial_weights_as_stock():
    stock, _, _ = build_model("transformer_wmt_en_de", seed=5)
    plugin, _, _ = build_model("transformer_attn_wmt_en_de", seed=5)
    for (name, a), (_, b) in zip(stock.state_dict().items(), plugin.state_dict().items()):
        assert_close(a, b, msg=name)


@pytest.mark.parametrize("variant", ["csan1d", "csan2d"])
@pytest.mark.parametrize("size", ["wmt_en_de", "vaswani_wmt_en_de_big"])
def test_csan_adds_no_parameters(variant, size):
    def count(m):
        return sum(p.numel() for p in m.parameters())

    small = ["--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-layers", "3",
             "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32"]
    base, _, _ = build_model(f"transformer_attn_{size}", extra=small)
    csan, _, args = build_model(f"transformer_{variant}_{size}", extra=small)
    assert args.attn_pieces == variant
    assert count(csan) == count(base)
    assert set(csan.state_dict()) == set(base.state_dict())


def test_architecture_defaults():
    _, _, base = build_model("transformer_csan2d_wmt_en_de", extra=["--encoder-layers", "3"])
    assert (base.csan_window, base.csan_heads, base.csan_layers, base.csan_head_edge) == (11, 3, "0-2", "cut")
    from fairseq import options

    def parse(*argv):
        return options.parse_args_and_arch(options.get_training_parser(), ["/x", *argv])

    big = parse("--arch", "transformer_csan2d_vaswani_wmt_en_de_big")
    assert (big.encoder_embed_dim, big.encoder_attention_heads, big.encoder_layers, big.dropout) == (1024, 16, 6, 0.3)
    assert big.attn_pieces == "csan2d" and big.csan_window == 11
    over = parse("--arch", "transformer_csan2d_wmt_en_de", "--csan-window", "5")
    assert over.csan_window == 5 and over.encoder_embed_dim == 512


@pytest.mark.parametrize("arch", ["transformer_attn_wmt_en_de", "transformer_csan1d_wmt_en_de",
                                  "transformer_csan2d_wmt_en_de"])
@pytest.mark.parametrize("left_pad", [True, False])
def test_encoder_output_unchanged_by_batching_with_longer_sentences(arch, left_pad):
    model, task, _ = build_model(arch, extra=["--csan-window", "3", "--csan-layers", "0-1"] if "csan" in arch else [])
    model.eval()
    d = task.source_dictionary
    lengths = [10, 4, 7]
    tokens, lens = token_batch(lengths, d, left_pad=left_pad)
    with torch.no_grad():
        batched = encode(model, tokens, lens)
        for b, n in enumerate(lengths):
            T = tokens.size(1)
            cols = slice(T - n, T) if left_pad else slice(0, n)
            alone = encode(model, tokens[b : b + 1, cols], lens[b : b + 1])
            assert_close(batched[cols, b : b + 1], alone, rtol=1e-5, atol=1e-5)


def test_invalid_flag_fails_at_model_build():
    from fairseq_attn_core import PieceConfigError

    with pytest.raises(PieceConfigError, match="--csan-heads"):
        build_model("transformer_csan2d_wmt_en_de", extra=["--csan-heads", "9", "--csan-layers", "0"])
    with pytest.raises(PieceConfigError, match="--csan-layers.*0..1"):
        build_model("transformer_csan1d_wmt_en_de", extra=["--csan-layers", "0-2"])


def test_san_p_architecture_has_no_token_positions():
    model, _, args = build_model("transformer_dpi_sanp_wmt_en_de",
                                 extra=["--dpi-max-len", "32", "--max-source-positions", "32",
                                        "--max-target-positions", "32"])
    assert args.attn_pieces == "dpi" and args.dpi_mode == "p" and args.dpi_sides == "both"
    assert model.encoder.embed_positions is None and model.decoder.embed_positions is None
    assert [p.name for p in model.encoder.layers[0].self_attn.pieces] == ["dpi"]


def test_model_built_with_a_task_pickles(tmp_path):
    """torch.save(model) of a model built by a task (as fairseq-generate builds it, no
    validation set ever loaded): the validation check's weak reference to the task stays
    out of the pickle, and the reloaded model computes the same outputs."""
    import os

    from fairseq import options, tasks

    from fairseq_attn_plugins.loading import PLUGIN_DIR

    data = os.path.join(os.path.dirname(__file__), "data", "relpos_checkpoint")
    args = options.parse_args_and_arch(options.get_training_parser(), [
        data, "--user-dir", PLUGIN_DIR, "--arch", "transformer_relpos_wmt_en_de", "-s", "src", "-t", "tgt",
        "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--cpu"])
    task = tasks.setup_task(args)
    model = task.build_model(args).eval()
    assert "_validation_check" in model.__dict__  # what made pickling fail
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False).eval()  # our own file
    assert "_validation_check" in model.__dict__  # the live model keeps its check
    src = torch.tensor([[5, 6, 7, 2]])
    prev = torch.tensor([[2, 8, 9]])
    with torch.no_grad():
        assert_close(loaded(src, torch.tensor([4]), prev)[0], model(src, torch.tensor([4]), prev)[0],
                     rtol=0, atol=0)
