"""RoPE, ALiBi and T5's relative bias against float64 references written from the
papers' formulas; their placement, embeddings and parameter sharing in the model.

The shared registry tests (test_piece_registry.py, test_empty_rows.py) cover padding
on either side, fused == explicit, incremental == full and every allowed combination."""

import json
import math

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import build_model, make_args, make_attention, output64, padded_batch, projections64
from fairseq_attn_plugins.attention import PieceConfigError
from fairseq_attn_plugins.attention.pieces.t5bias import relative_position_bucket
from run_records import write_record
from piece_refs import causal_mask, incremental_outputs, loop_apply64, loop_probs64


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


# ---------------------------------------------------------------- RoPE
def rope64(x, base, rot):
    """Su et al. eq. 34: pairs (2i, 2i+1) rotated by position * base^(-2i/rot), loops."""
    out = x.clone()
    B, H, L, D = x.shape
    for b in range(B):
        for h in range(H):
            for m in range(L):
                for i in range(rot // 2):
                    a = m * base ** (-2.0 * i / rot)
                    x1, x2 = float(x[b, h, m, 2 * i]), float(x[b, h, m, 2 * i + 1])
                    out[b, h, m, 2 * i] = x1 * math.cos(a) - x2 * math.sin(a)
                    out[b, h, m, 2 * i + 1] = x1 * math.sin(a) + x2 * math.cos(a)
    return out


@pytest.mark.parametrize("side, causal, left_pad, fraction, rot",
                         [case + (1.0, 8) for case in CASES] + [CASES[0] + (0.5, 4), CASES[1] + (0.3, 2)])
def test_rope_matches_rotation_formula(side, causal, left_pad, fraction, rot):
    base = 100.0  # small base: the last pairs turn noticeably within 7 positions
    args = make_args("rope", rope_theta=base, rope_fraction=fraction)
    attn = make_attention(args, side=side, embed_dim=16, num_heads=2).eval()  # head_dim 8
    assert attn.pieces[0].rot == rot
    x, kpm = padded_batch([7, 4], left_pad=left_pad)
    ref = reference(attn, x, kpm, causal, qk=lambda q, k: (rope64(q, base, rot), rope64(k, base, rot)))
    assert_close(run(attn, x, kpm, causal), ref, rtol=1e-5, atol=1e-5)
    assert attn.uses_fused_path()


def rope_halves64(x, base, rot):
    """GPT-NeoX / Hugging Face pairing: (i, i + rot/2) rotated by position * base^(-2i/rot)."""
    out = x.clone()
    B, H, L, D = x.shape
    half = rot // 2
    for b in range(B):
        for h in range(H):
            for m in range(L):
                for i in range(half):
                    a = m * base ** (-2.0 * i / rot)
                    x1, x2 = float(x[b, h, m, i]), float(x[b, h, m, i + half])
                    out[b, h, m, i] = x1 * math.cos(a) - x2 * math.sin(a)
                    out[b, h, m, i + half] = x1 * math.sin(a) + x2 * math.cos(a)
    return out


def test_rope_pairs_neighbours_not_halves_and_a_row_permutation_maps_one_to_the_other():
    """Our pairs (2i, 2i+1) are not NeoX's (i, i + r/2): the same q, k give other scores; the
    two agree once q and k (i.e. W_q, W_k rows within each head) are permuted 2i <- i,
    2i+1 <- i + r/2 -- what porting weights between the conventions takes."""
    base, rot = 100.0, 6
    args = make_args("rope", rope_theta=base, rope_fraction=0.75)  # 6 of 8 dimensions
    piece = make_attention(args, embed_dim=16, num_heads=2).pieces[0]
    assert piece.rot == rot
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(1, 2, 7, 8, generator=g).double(), torch.randn(1, 2, 7, 8, generator=g).double()
    pos = torch.arange(7)
    ours = lambda t: piece.transform_qkv(t, t, t, type("Ctx", (), {"q_pos": pos, "k_pos": pos})())[0]
    assert_close(ours(q), rope64(q, base, rot))
    scores = lambda a, b: a @ b.transpose(-1, -2)
    neox = scores(rope_halves64(q, base, rot), rope_halves64(k, base, rot))
    assert (scores(ours(q), ours(k)) - neox).abs().max() > 1e-2
    perm = [j for i in range(rot // 2) for j in (i, i + rot // 2)] + list(range(rot, 8))
    assert_close(scores(ours(q[..., perm]), ours(k[..., perm])), neox)


def test_rope_score_depends_on_distance_only():
    from fairseq_attn_plugins.attention.pieces.rope import rotate

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, 8, generator=g, dtype=torch.float64), torch.randn(1, 1, 1, 8, generator=g, dtype=torch.float64)
    scores = [float((rotate(q, torch.tensor([m]), 8, 10000.0) * rotate(k, torch.tensor([m + 3]), 8, 10000.0)).sum())
              for m in (0, 5, 40)]
    assert scores[0] == pytest.approx(scores[1], abs=1e-9) and scores[0] == pytest.approx(scores[2], abs=1e-9)
    assert scores[0] != pytest.approx(float((q * k).sum()), abs=1e-3)  # the rotation does something


def test_rope_flags_refused_with_allowed_values():
    with pytest.raises(PieceConfigError, match="--rope-fraction must be a number in"):
        make_args("rope", rope_fraction=1.5)
    with pytest.raises(PieceConfigError, match="--rope-theta must be a number > 0, finite"):
        make_args("rope", rope_theta=0)
    with pytest.raises(PieceConfigError, match="--rope-fraction 0.1 rotates no pair"):
        make_attention(make_args("rope", rope_fraction=0.1), embed_dim=16, num_heads=2)


# ---------------------------------------------------------------- ALiBi
def test_alibi_slopes_follow_the_paper():
    from fairseq_attn_plugins.attention.pieces.alibi import alibi_slopes

    # power of two: 2^(-8h/H), h = 1..H
    assert alibi_slopes(8) == pytest.approx([2.0 ** -e for e in range(1, 9)])
    assert alibi_slopes(4) == pytest.approx([2.0 ** -e for e in (2, 4, 6, 8)])
    assert alibi_slopes(16) == pytest.approx([2.0 ** (-e / 2) for e in range(1, 17)])
    # otherwise: the slopes of the largest power of two n < H, then every other slope of 2n heads
    assert alibi_slopes(12) == pytest.approx([2.0 ** -e for e in range(1, 9)]
                                             + [2.0 ** -e for e in (0.5, 1.5, 2.5, 3.5)])
    assert alibi_slopes(6) == pytest.approx([2.0 ** -e for e in (2, 4, 6, 8)] + [2.0 ** -1, 2.0 ** -3])


def alibi_bias(slopes):
    return lambda b, h, i, j: -slopes[h] * abs(i - j)


@pytest.mark.parametrize("backend", ["fused", "flex"])  # explicit == fused: the registry tests
@pytest.mark.parametrize("side, causal, left_pad", CASES)
def test_alibi_matches_linear_penalty(side, causal, left_pad, backend):
    attn = make_attention(make_args("alibi"), side=side, backend=backend).eval()  # 4 heads
    slopes = [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8]
    x, kpm = padded_batch([7, 4], left_pad=left_pad)
    ref = reference(attn, x, kpm, causal, bias=alibi_bias(slopes))
    assert_close(run(attn, x, kpm, causal), ref, rtol=1e-5, atol=1e-5)
    assert attn.uses_flex_piece(False, 0.0, False) == (backend == "flex")


def test_alibi_flex_path_decodes_incrementally():
    """The flex path offsets query positions during cached decoding (CPU: forward only,
    flex_attention has no CPU backward; the CUDA kernel is checked by the benchmark)."""
    flex = make_attention(make_args("alibi"), side="decoder", backend="flex").eval()
    fused = make_attention(make_args("alibi"), side="decoder", backend="fused").eval()
    x, _ = padded_batch([6, 6], left_pad=False)
    with torch.no_grad():
        steps = incremental_outputs(flex, x).double()
    assert_close(steps, run(fused, x, None, True), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- T5
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
    assert attn.uses_fused_path()


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


# ---------------------------------------------------------------- in the model
@pytest.mark.parametrize("name", ["rope", "alibi", "t5bias"])
def test_architectures_replace_token_positions_on_every_layer(name):
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


@pytest.mark.parametrize("name", ["rope", "alibi", "t5bias"])
def test_model_padding_side_and_incremental_decoding(name):
    """Encoder output is the same for left- and right-padded sources (no token positions
    left to shift); the decoder's cached steps equal the full forward."""
    from attn_helpers import token_batch

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
    enc = model.encoder(src, src_lengths=lengths)
    full, _ = model.decoder(prev, encoder_out=enc)
    state, steps = {}, []
    for t in range(prev.size(1)):
        y, _ = model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
        steps.append(y)
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- Table 1's extra rows
def test_table1_extra_rows_listed_and_rendered_when_present(tmp_path):
    from fairseq_attn_plugins.cli import paper
    from fairseq_attn_plugins.reporting import table1
    from fairseq_attn_plugins.toy_corpus import make_corpus

    assert [r.key for r in table1.resolve_rows("all")] == [r.key for r in table1.ROWS]
    rows = table1.resolve_rows("t5bias,all,rope")
    assert [r.key for r in rows] == [r.key for r in table1.ROWS] + ["rope", "t5bias"]
    assert [r.label for r in table1.EXTRA_ROWS] == [
        "+ RoPE Su et al. (2021)", "+ ALiBi Press et al. (2022)", "+ T5 bias Raffel et al. (2020)"]

    refs = [t for _, t in make_corpus(60, seed=5)]
    (tmp_path / "ref").write_text("\n".join(refs) + "\n")
    log = ("x | INFO | fairseq_cli.train | num. shared model params: {p:,} (num. trained: {p:,})\n"
           'x | INFO | train | {{"epoch": 1, "train_loss": "7.0", "train_wps": "100", "train_ups": "2.0", "train_num_updates": "10"}}\n')
    for key, params in (("baseline", 41_500), ("rel_pos", 42_000), ("alibi", 41_500)):
        d = tmp_path / "runs" / key
        write_record(d, table1.ROW_BY_KEY[key].arch)
        (d / "train.log").write_text(log.format(p=params))
        (d / "hyp.txt").write_text("\n".join(refs) + "\n")
    out = tmp_path / "t.json"
    spec = "baseline,rel_pos"  # (--rows all would need a run of every paper row)
    assert paper.main(["table1", "--ref", str(tmp_path / "ref"), "--runs-dir", str(tmp_path / "runs"),
                       "--rows", spec + ",alibi", "--no-base-size", "--ar-trials", "100",
                       "--bs-samples", "100", "--json", str(out), "--md", str(tmp_path / "t.md")]) == 0
    got = json.loads(out.read_text())["rows"]
    assert [r["key"] for r in got] == ["baseline", "rel_pos", "alibi"]
    assert got[2]["paper"] == {"params": None, "speed": None, "bleu": None, "delta": None}
    line = (tmp_path / "t.md").read_text().splitlines()[4]
    assert line.startswith("| + ALiBi Press et al. (2022) | +0.0M |") and line.endswith("| - | - | - | - |")
    assert [r.key for r in table1.with_present_extras(table1.resolve_rows(spec), str(tmp_path / "runs"))] \
        == ["baseline", "rel_pos", "alibi"]
