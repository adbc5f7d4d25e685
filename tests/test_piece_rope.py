"""RoPE (Su et al. 2021) against a float64 reference written from the paper's rotation;
its flags, placement and embeddings in the model. The shared registry tests
(test_piece_registry.py, test_empty_rows.py) cover padding on either side, fused ==
explicit, incremental == full and every allowed combination."""

import math

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, padded_batch, path_name
from fairseq_attn_core import PieceConfigError
from position_helpers import (
    CASES,
    check_architectures_replace_token_positions_on_every_layer,
    check_model_padding_side_and_incremental_decoding,
    reference,
    run,
)


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
    assert path_name(attn) == "fused"


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
    from fairseq_attn_core.pieces.rope import rotate

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


def test_architecture_replaces_token_positions_on_every_layer():
    check_architectures_replace_token_positions_on_every_layer("rope")


def test_model_padding_side_and_incremental_decoding():
    check_model_padding_side_and_incremental_decoding("rope")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_rope_cached_tables_give_the_formula_bit_for_bit(dtype):
    """The cos/sin tables are cached per rotation, length, device and dtype: a call at a longer
    length grows them, a shorter one reads them, and every rotation equals the paper's pair
    formula with angles in float64 cast to the compute dtype, bit for bit."""
    from fairseq_attn_core.pieces.rope import rotate, rotation_tables

    g = torch.Generator().manual_seed(2)
    rot, base = 6, 500.0 + (dtype is torch.bfloat16)  # a key no other test fills
    for length in (5, 40, 7):
        x = torch.randn(2, 3, length, 8, generator=g).to(dtype)
        pos = torch.arange(length)
        got = rotate(x, pos, rot, base, length)
        acc = torch.promote_types(dtype, torch.float32)
        assert rotation_tables(length, rot, base, x.device, acc)[0].size(0) >= length
        want = x.clone()
        for m in range(length):
            for i in range(rot // 2):
                angle = m * base ** (-2 * i / rot)
                c = torch.tensor(math.cos(angle), dtype=torch.float64).to(acc)
                s = torch.tensor(math.sin(angle), dtype=torch.float64).to(acc)
                x1, x2 = x[..., m, 2 * i].to(acc), x[..., m, 2 * i + 1].to(acc)
                want[..., m, 2 * i] = (x1 * c - x2 * s).to(dtype)
                want[..., m, 2 * i + 1] = (x1 * s + x2 * c).to(dtype)
        assert torch.equal(got, want)
    assert rotation_tables(7, rot, base, x.device, acc)[0].size(0) == 64  # grown once, to 2^6
