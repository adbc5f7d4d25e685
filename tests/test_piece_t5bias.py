"""T5's relative bias (Raffel et al. 2020) against float64 references: the bucketing,
the table lookup, the table sharing, its flags, placement and embeddings in the model. The
shared registry tests (test_piece_registry.py, test_empty_rows.py) cover padding on either
side, fused == explicit, incremental == full and every allowed combination."""

import math

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import build_model, make_args, make_attention, padded_batch, path_name
from fairseq_attn_plugins.attention import PieceConfigError
from fairseq_attn_plugins.attention.pieces.t5bias import relative_position_bucket
from position_helpers import (
    CASES,
    check_architectures_replace_token_positions_on_every_layer,
    check_model_padding_side_and_incremental_decoding,
    reference,
    run,
)


def t5_bucket(rel, bidirectional, num_buckets, max_distance):
    """T5's bucketing for one relative position (key - query), written out."""
    n, bucket = num_buckets, 0
    if bidirectional:
        n //= 2
        if rel > 0:
            bucket += n
        rel = abs(rel)
    else:
        rel = max(-rel, 0)
    exact = n // 2
    if rel < exact:
        return bucket + rel
    # float32 as T5 computes it
    ratio = torch.tensor(rel / exact, dtype=torch.float32).log() / math.log(max_distance / exact)
    return bucket + min(n - 1, exact + int(float(ratio.float() * (n - exact))))


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
    table = attn.pieces[0].bucket_bias.detach().double().tolist()  # (N, H)
    bidir = side == "encoder"
    bias = lambda b, h, i, j: table[t5_bucket(j - i, bidir, 8, 6)][h]
    x, kpm = padded_batch([7, 4], left_pad=left_pad)
    ref = reference(attn, x, kpm, causal, bias=bias)
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
