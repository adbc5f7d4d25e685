"""Shared float64 references and model checks of the position-method piece tests (rope,
alibi, t5bias; not a test module)."""

import math

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import build_model, output64, projections64
from fairseq_attn_core import PieceConfigError
from piece_refs import causal_mask, loop_apply64, loop_probs64


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


def reference(attn, x, kpm, causal, qk=None, bias=None):
    """Attention output (T, B, C) in float64 with loops; ``qk(q, k)`` transforms q and k,
    ``bias(b, h, i, j)`` adds to the scaled score (indices of the padded batch)."""
    q, k, v = projections64(attn, x)
    if qk is not None:
        q, k = qk(q, k)
    probs = loop_probs64(q, k, kpm, bias=bias, causal=causal)
    return output64(attn, loop_apply64(probs, v))


def run(attn, x, kpm, causal):
    mask = causal_mask(x.size(0)) if causal else None
    with torch.no_grad():  # flex_attention has no backward on CPU
        out, _ = attn(x, x, x, key_padding_mask=kpm, attn_mask=mask, need_weights=False)
    return out.double()


CASES = [("encoder", False, True), ("encoder", False, False), ("decoder", True, False)]


def check_architectures_replace_token_positions_on_every_layer(name):
    model, _, args = build_model(f"transformer_{name}_wmt_en_de")
    assert model.encoder.embed_positions is None and model.decoder.embed_positions is None
    for stack in (model.encoder, model.decoder):
        assert all([p.name for p in layer.self_attn.pieces] == [name] for layer in stack.layers)
    prefix = "t5" if name == "t5bias" else name
    kept, _, _ = build_model(f"transformer_{name}_wmt_en_de", [f"--{prefix}-abs-pos", "keep"])
    assert kept.encoder.embed_positions is not None and kept.decoder.embed_positions is not None
    with pytest.raises(PieceConfigError, match=f"--{prefix}-abs-pos drop .* needs --{prefix}-sides"):
        build_model(f"transformer_{name}_wmt_en_de", [f"--{prefix}-sides", "encoder"])
    assert f"transformer_{name}_vaswani_wmt_en_de_big" in __import__(
        "fairseq.models", fromlist=["x"]).ARCH_MODEL_NAME_REGISTRY


def check_model_padding_side_and_incremental_decoding(name):
    """Encoder output is the same for left- and right-padded sources (no token positions
    left to shift); the decoder's cached steps equal the full forward."""
    from attn_helpers import assert_decoder_steps_equal_full, token_batch

    model, task, _ = build_model(f"transformer_{name}_wmt_en_de")
    model.eval()
    d = task.source_dictionary
    outs = {}
    for left in (True, False):
        src, lengths = token_batch([6, 3], d, left_pad=left)
        enc = model.encoder(src, src_lengths=lengths)["encoder_out"][0]  # (T, B, C)
        real = src.ne(d.pad()).t()
        outs[left] = [enc[real[:, b], b] for b in range(2)]
    for a, b in zip(outs[True], outs[False]):
        assert_close(a, b, rtol=1e-5, atol=1e-5)

    src, lengths = token_batch([6, 3], d)
    prev, _ = token_batch([5, 5], d, left_pad=False, seed=4)
    assert_decoder_steps_equal_full(model, src, lengths, prev, rtol=1e-5, atol=1e-5)
