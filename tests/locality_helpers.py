"""Shared builders of the float64 references of the locality baselines (localsoft,
localhard, neighbor, block, cnns; Table 1 of Yang et al. 2019): the layer under test, the
predictor written out, the loop check of a score-bias piece and a tiny model (not a test
module). What the declarations decide (bad flags, layers, parameter deltas, train/resume)
is tested by ``test_piece_declarations.py`` for every piece."""

import argparse
from types import SimpleNamespace

import torch
from fairseq.models import ARCH_CONFIG_REGISTRY

from attn_helpers import make_args, make_attention, output64, projections64, seed_cpu, toy_dictionary
from fairseq_attn_plugins.models.transformer_attn import AttnTransformerModel
from piece_refs import assert_matches_reference, loop_apply64, loop_probs64

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
    def reference(attn, x, kpm):
        q, k, v = projections64(attn, x)
        return output64(attn, loop_apply64(loop_probs64(q, k, kpm, bias_of(q, kpm)), v))

    assert_matches_reference(attn, reference, LENGTHS)


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
    seed_cpu(0)
    task = SimpleNamespace(source_dictionary=d, target_dictionary=d)
    return AttnTransformerModel.build_model(args, task).eval(), d
