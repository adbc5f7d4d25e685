"""Parameter deltas at Transformer-base size (512 dims, 8 heads of 64, 6+6 layers) of the
pieces whose papers state a parameter count, each computed from its formula, checked against the built
model and printed next to the paper's number (run with ``-s`` to see them)."""

import pytest
import torch

from attn_helpers import toy_dictionary

import fairseq_attn_plugins  # noqa: F401

H, D, LAYERS = 8, 64, 6


def count_base(arch, extra=()):
    from fairseq import options
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks.translation import TranslationTask

    d = toy_dictionary()
    args = options.parse_args_and_arch(
        options.get_training_parser(), ["/nonexistent", "--arch", arch, "--task", "translation", *extra])
    assert (args.encoder_embed_dim, args.encoder_attention_heads, args.encoder_layers) == (H * D, H, LAYERS)
    # built on the meta device: the same modules and parameter shapes, nothing allocated or
    # initialised (dpi_sanpr's tables alone hold 2 x 8.4M values)
    with torch.device("meta"):
        model = ARCH_MODEL_REGISTRY[arch].build_model(args, TranslationTask(args, d, d))
    assert all(p.is_meta for p in model.parameters())
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def baseline():
    return count_base("transformer_attn_wmt_en_de")


def report(name, delta, paper):
    print(f"\n{name}: +{delta:,} parameters (+{delta / 1e6:.2f}M) at base size; paper: {paper}")


def test_chained_shared_w_attn(baseline):
    # one W_attn (4k x k, k = head dim) shared by the heads, in each of the 6 encoder layers
    formula = LAYERS * 4 * D * D
    delta = count_base("transformer_chained_wmt_en_de") - baseline
    assert delta == formula == 98_304
    report("chained (shared W_attn, K=4, encoder)", delta, "+0.11% (Gupta 2019, QANet 1.753M -> 1.755M)")
    dense = count_base("transformer_chained_wmt_en_de", ["--chained-w-attn", "dense"]) - baseline
    assert dense == LAYERS * (H * D) * (H * 4 * D)
    report("chained --chained-w-attn dense", dense, "(not the paper's form)")
    both = count_base("transformer_chained_wmt_en_de", ["--chained-sides", "both"]) - baseline
    assert both == 2 * formula
    report("chained --chained-sides both", both, "(the paper has no decoder)")



def test_dpi_san_pr(baseline):
    t = 1024  # --dpi-max-len default = fairseq's --max-source-positions
    per_layer = H * t * t + H * (2 * t - 1)  # A^p (H, t, t) + a^r (H, 2t-1), first layer
    formula = 2 * per_layer  # encoder and decoder
    delta = count_base("transformer_dpi_sanpr_wmt_en_de") - baseline
    assert delta == formula
    report("dpi_sanpr (t=1024, layer 0 of encoder and decoder)", delta,
           "H(t^2 + 2t) per layer (Dufter et al. 2020, Table 1c); fairseq's sinusoidal "
           "embeddings it replaces have no parameters")
