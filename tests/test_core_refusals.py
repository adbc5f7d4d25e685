"""The core in plain torch refuses what it does not know, in one line: a site no piece could
cover (a side spelt otherwise, a layer past the model's), a site whose heads disagree with the
layer, a namespace key nothing declares, a namespace never filled by ``attention_defaults``,
and input in another layout than fairseq's (T, B, C). The documented example runs as shown."""

import argparse
import os
import re

import pytest
import torch

from fairseq_attn_core import (
    AttentionSite,
    PieceConfigError,
    SelfAttention,
    attention_defaults,
    build_pieces,
    validate_attention_args,
)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SIZES = dict(encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4)


def core_args(**flags) -> argparse.Namespace:
    args = argparse.Namespace(**SIZES, **flags)
    attention_defaults(args)
    return args


def one_line(e) -> str:
    text = str(e.value)
    assert "\n" not in text, text
    return text


@pytest.mark.parametrize("side", ["Encoder", "enc", "both", "encoder_decoder"])
def test_a_site_on_an_unknown_side_is_refused(side):
    with pytest.raises(ValueError) as e:
        AttentionSite(side=side, layer_idx=0, num_layers=2, num_heads=4, head_dim=4)
    assert one_line(e) == f"AttentionSite: side must be one of ['encoder', 'decoder'] (got {side!r})"


def test_a_site_past_the_models_layers_is_refused_and_every_layer_of_the_model_holds_its_pieces():
    for layer_idx in (2, 5, -1):
        with pytest.raises(ValueError) as e:
            AttentionSite(side="encoder", layer_idx=layer_idx, num_layers=2, num_heads=4, head_dim=4)
        assert one_line(e) == ("AttentionSite: layer_idx must be an integer in [0, 1] (0-based from the "
                               f"embeddings, num_layers=2) (got {layer_idx})")
    # the checks refuse no site a model has: relpos where its flags say (layer 1 of the encoder)
    args = core_args(attn_pieces="relpos", relpos_layers="1", relpos_sides="encoder", relpos_abs_pos="keep")
    validate_attention_args(args)
    for side in ("encoder", "decoder"):
        for i in range(2):
            site = AttentionSite(side=side, layer_idx=i, num_layers=2, num_heads=4, head_dim=4)
            names = [p.name for p in build_pieces(args, site)]
            assert names == (["relpos"] if (side, i) == ("encoder", 1) else []), (side, i)


@pytest.mark.parametrize("field, value", [("num_layers", 0), ("num_heads", 0), ("head_dim", -4),
                                          ("num_heads", 4.0), ("head_dim", True)])
def test_a_site_without_layers_heads_or_width_is_refused(field, value):
    sizes = dict(num_layers=2, num_heads=4, head_dim=4)
    sizes[field] = value
    with pytest.raises(ValueError) as e:
        AttentionSite(side="decoder", layer_idx=0, **sizes)
    assert one_line(e) == f"AttentionSite: {field} must be an integer >= 1 (got {value!r})"


@pytest.mark.parametrize("heads, head_dim", [(4, 8), (2, 8), (8, 4)])
def test_a_site_whose_heads_disagree_with_the_layer_is_refused(heads, head_dim):
    site = AttentionSite(side="encoder", layer_idx=0, num_layers=1, num_heads=heads, head_dim=head_dim)
    with pytest.raises(ValueError) as e:
        SelfAttention(16, 4, site)
    assert one_line(e) == (f"SelfAttention(16, 4): the site says num_heads={heads}, head_dim={head_dim}; "
                           f"expected num_heads=4, head_dim=4 (embed_dim / num_heads), which the pieces "
                           f"are built for")


def test_a_misspelt_flag_in_the_namespace_is_refused_with_the_nearest_names():
    args = core_args(attn_pieces="csan2d", csan_layers="0", csan_windw=3)
    with pytest.raises(PieceConfigError) as e:
        validate_attention_args(args)
    assert one_line(e).startswith("'csan_windw' is no flag of a piece or of the core, nor a model setting "
                                  "the core reads (did you mean 'csan_window'")


def test_a_key_the_core_does_not_read_is_refused_and_its_model_settings_pass():
    args = core_args(attn_pieces="relpos", relpos_layers="0", encoder_embed_dim=16, decoder_embed_dim=16,
                     attention_dropout=0.1, dropout=0.1, max_source_positions=64, max_target_positions=64)
    validate_attention_args(args)  # the model settings the core reads
    args.encoder_ffn_embed_dim = 64
    with pytest.raises(PieceConfigError) as e:
        validate_attention_args(args)
    assert one_line(e).startswith("'encoder_ffn_embed_dim' is no flag of a piece or of the core")
    validate_attention_args(args, fairseq_namespace=True)  # fairseq's parser checks its own names


def test_a_namespace_never_filled_with_the_defaults_is_refused_in_one_line():
    args = argparse.Namespace(**SIZES, attn_pieces="relpos", relpos_layers="0")
    site = AttentionSite(side="encoder", layer_idx=0, num_layers=2, num_heads=4, head_dim=4)
    for call in (lambda: validate_attention_args(args), lambda: build_pieces(args, site)):
        with pytest.raises(PieceConfigError) as e:
            call()
        text = one_line(e)
        assert text.startswith("the namespace lacks attn_backend, attn_flex_compile, ") and text.endswith(
            "more flags: call attention_defaults(args) first (it fills every flag not set with its default)")


def test_a_namespace_without_the_model_sizes_is_refused_in_one_line():
    args = argparse.Namespace(attn_pieces="relpos", encoder_layers=2, encoder_attention_heads=4)
    attention_defaults(args)
    with pytest.raises(PieceConfigError) as e:
        validate_attention_args(args)
    assert one_line(e).startswith("the namespace lacks decoder_layers, decoder_attention_heads: the model's sizes")


def layer():
    site = AttentionSite(side="encoder", layer_idx=0, num_layers=1, num_heads=4, head_dim=4)
    return SelfAttention(16, 4, site)


@pytest.mark.parametrize("shape", [(7, 2, 8), (7, 16), (1, 7, 2, 16)])
def test_input_of_another_width_or_rank_is_refused_naming_the_layout(shape):
    x = torch.zeros(shape)
    with pytest.raises(ValueError) as e:
        layer()(x, x, x, need_weights=False)
    assert one_line(e) == (f"SelfAttention (encoder layer 0): input of shape {shape}; expected (T, B, C) = "
                           f"(time, batch, 16), time first as in fairseq")


def test_batch_first_input_with_its_padding_mask_is_refused_and_time_first_runs():
    attn = layer()
    x = torch.randn(2, 7, 16)  # (B, T, C)
    kpm = torch.zeros(2, 7, dtype=torch.bool)
    with pytest.raises(ValueError) as e:
        attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    assert one_line(e) == ("SelfAttention (encoder layer 0): input of shape (2, 7, 16) and key_padding_mask of "
                           "shape (2, 7); expected (T, B, C) = (time, batch, 16), time first as in fairseq, and "
                           "key_padding_mask (B, T) with True = pad (batch-first input: x.transpose(0, 1))")
    y = x.transpose(0, 1)
    out, _ = attn(y, y, y, key_padding_mask=kpm, need_weights=False)
    assert out.shape == (7, 2, 16)


def plain_torch_section(text: str) -> str:
    return re.search(r"## The core in a torch model\n(.*?)\n## ", text, re.S).group(1)


def test_the_documented_example_runs_and_the_readme_links_it():
    with open(os.path.join(ROOT, "docs", "explanation", "architecture.md"), encoding="utf-8") as f:
        section = plain_torch_section(f.read())
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "docs/explanation/architecture.md", "exec"), scope)
    assert scope["out"].shape == (7, 2, 16) and [p.name for p in scope["attn"].pieces] == ["relpos", "csan2d"]
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        assert "(docs/explanation/architecture.md#the-core-in-a-torch-model)" in f.read()


@pytest.mark.parametrize("flag, value, owners", [("csan_window", 5, "csan1d / csan2d"), ("localsoft_layers", "0", "localsoft")])
def test_a_flag_of_a_piece_that_is_not_active_is_refused_as_on_fairseqs_route(flag, value, owners):
    """attn_pieces="relpos" with another piece's flag: refused by validate_attention_args, naming the
    key as the namespace holds it (the command line's --flag on fairseq's route)."""
    args = core_args(attn_pieces="relpos", **{flag: value})
    with pytest.raises(PieceConfigError) as e:
        validate_attention_args(args)
    assert one_line(e) == (f"{flag}={value!r} belongs to {owners}, which is not active: the active pieces are "
                           f"['relpos'] (attn_pieces='relpos'): add {owners.replace(' / ', ' or ')} to attn_pieces, "
                           f"or drop {flag}")
    # active, or a default the core filled: accepted
    validate_attention_args(core_args(attn_pieces="relpos,localsoft", localsoft_layers="0"))
    validate_attention_args(core_args(attn_pieces="relpos"))
