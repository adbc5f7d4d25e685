"""T5's relative bias (Raffel et al. 2020) against float64 references: the bucketing,
the table lookup, the table sharing, its flags, placement and embeddings in the model. The
shared registry tests (test_piece_registry.py, test_empty_rows.py) cover padding on either
side, fused == explicit, incremental == full and every allowed combination."""

import math

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import build_model, make_args, make_attention, output64, padded_batch, path_name, projections64
from distance_refs import t5bias64
from piece_refs import loop_apply64
from fairseq_attn_core import PieceConfigError
from fairseq_attn_core.pieces.t5bias import relative_position_bucket
from position_helpers import (
    CASES,
    check_architectures_replace_token_positions_on_every_layer,
    check_model_padding_side_and_incremental_decoding,
    run,
    t5_bucket,
)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (8, 6), (10, 20)])
def test_t5_buckets_follow_t5(bidirectional, num_buckets, max_distance):
    rel = torch.arange(-300, 301)
    got = relative_position_bucket(rel, bidirectional, num_buckets, max_distance).tolist()
    want = [t5_bucket(r, bidirectional, num_buckets, max_distance) for r in rel.tolist()]
    assert got == want
    if (num_buckets, max_distance) == (32, 128):  # T5's: every bucket is reachable, except
        unused = {16} if bidirectional else set()  # that distance 0 counts to the left
        assert set(got) == set(range(32)) - unused


def test_t5_buckets_known_values():
    """T5's defaults: exact up to 7 (15 causal), log-spaced after, the last from 128 on."""
    b = lambda r, bi: int(relative_position_bucket(torch.tensor([r]), bi, 32, 128))
    assert [b(r, True) for r in (0, -1, -7, 1, 7)] == [0, 1, 7, 17, 23]
    assert b(-8, True) == 8 and b(-127, True) == 15 and b(-128, True) == 15 and b(-1000, True) == 15
    assert b(1000, True) == 31
    assert [b(r, False) for r in (0, 5, -5, -15, -16, -127, -5000)] == [0, 0, 5, 15, 16, 31, 31]


@pytest.mark.parametrize("side, causal, left_pad", CASES)
def test_t5bias_matches_bucket_table(side, causal, left_pad):
    args = make_args("t5bias", t5_buckets=8, t5_max_distance=6)
    attn = make_attention(args, side=side).eval()
    table = attn.pieces[0].bucket_bias.detach().double()  # (N, H)
    x, kpm = padded_batch([7, 4], left_pad=left_pad)
    q, k, v = projections64(attn, x)
    ref = output64(attn, t5bias64(q, k, v, table, 8, 6, attn.scaling, kpm, causal=causal)[0])
    assert_close(run(attn, x, kpm, causal), ref, rtol=1e-5, atol=1e-5)
    assert path_name(attn) == "fused"


def flags(*pairs):
    return [str(a) for a in pairs]


def test_t5bias_table_shared_by_the_layers_of_each_stack():
    model, _, _ = build_model("transformer_t5bias_wmt_en_de", flags("--t5-buckets", 8))
    for stack in (model.encoder, model.decoder):
        pieces = [layer.self_attn.pieces[0] for layer in stack.layers]
        assert pieces[0].bucket_bias is not None and pieces[1].bucket_bias is None
        assert pieces[1].table() is pieces[0].table()
    assert model.encoder.layers[0].self_attn.pieces[0].table() is not \
        model.decoder.layers[0].self_attn.pieces[0].table()
    keys = [k for k in model.state_dict() if "bucket_bias" in k]
    assert keys == ["encoder.layers.0.self_attn.pieces.0.bucket_bias",
                    "decoder.layers.0.self_attn.pieces.0.bucket_bias"]
    # the second layer's use of the table reaches its gradient
    enc = model.encoder.layers
    x, kpm = padded_batch([5, 3], embed_dim=16)
    out, _ = enc[1].self_attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    out.sum().backward()
    assert enc[0].self_attn.pieces[0].bucket_bias.grad.abs().sum() > 0

    per_layer, _, _ = build_model("transformer_t5bias_wmt_en_de", flags("--t5-sharing", "layer"))
    keys = [k for k in per_layer.state_dict() if "bucket_bias" in k]
    assert len(keys) == 4
    assert sum(p.numel() for p in per_layer.parameters()) - sum(p.numel() for p in model.parameters()) \
        == 4 * 32 * 4 - 2 * 8 * 4


def test_t5bias_flags_refused_with_allowed_values():
    with pytest.raises(PieceConfigError, match="--t5-buckets must be an even integer"):
        make_args("t5bias", t5_buckets=9)
    with pytest.raises(PieceConfigError, match="--t5-max-distance must be an integer > --t5-buckets / 2 = 16"):
        make_args("t5bias", t5_max_distance=16)
    with pytest.raises(PieceConfigError, match="--t5-sharing must be one of"):
        make_args("t5bias", t5_sharing="model")
    with pytest.raises(PieceConfigError, match="--t5-sharing stack .* fully_sharded"):
        make_args("t5bias", ddp_backend="fully_sharded")
    make_args("t5bias", ddp_backend="fully_sharded", t5_sharing="layer")


def test_architecture_replaces_token_positions_on_every_layer():
    check_architectures_replace_token_positions_on_every_layer("t5bias")


def test_model_padding_side_and_incremental_decoding():
    check_model_padding_side_and_incremental_decoding("t5bias")


def test_t5bias_table_is_t5s_with_the_scaling_absorbed_by_w_q():
    """T5 adds the table to UNscaled q.k; ours adds it to q.k / sqrt(d). With T5's
    W_q = ours / sqrt(d) (weights and bias), T5's formula with OUR table unchanged gives our output."""
    args = make_args("t5bias", t5_buckets=8, t5_max_distance=6)
    attn = make_attention(args, side="encoder").eval()
    with torch.no_grad():
        attn.pieces[0].bucket_bias.normal_(0, 1.0)  # a table that matters
    table = attn.pieces[0].bucket_bias.detach().double().tolist()
    d = attn.head_dim
    x, kpm = padded_batch([7, 4])
    q, k, v = projections64(attn, x)  # q = x W_q^T + b_q, unscaled
    q_t5 = q / math.sqrt(d)  # T5's W_q, b_q
    B, H, T, _ = q.shape
    probs = [[[[0.0] * T for _ in range(T)] for _ in range(H)] for _ in range(B)]
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = [j for j in range(T) if not bool(kpm[b, j])]
                # T5: q.k unscaled, plus the table entry of the bucket of j - i
                logits = [float(q_t5[b, h, i] @ k[b, h, j]) + table[t5_bucket(j - i, True, 8, 6)][h]
                          for j in keys]
                top = max(logits)
                z = sum(math.exp(e - top) for e in logits)
                for j, e in zip(keys, logits):
                    probs[b][h][i][j] = math.exp(e - top) / z
    assert_close(run(attn, x, kpm, False), output64(attn, loop_apply64(probs, v)), rtol=1e-5, atol=1e-5)
