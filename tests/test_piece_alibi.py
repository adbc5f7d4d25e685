"""ALiBi (Press et al. 2022) against float64 references written from the paper: its slopes,
the penalty on the fused and flex paths (flex in float64 at a head count that is not a power
of two, the slopes in the model's dtype), incremental decoding, placement and embeddings in
the model. The shared registry tests (test_piece_registry.py, test_empty_rows.py) cover
padding on either side, fused == explicit, incremental == full and every combination."""



import pytest
import torch
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, output64, padded_batch, path_name, projections64
from distance_refs import alibi64
from piece_refs import incremental_outputs
from position_helpers import (
    CASES,
    check_architectures_replace_token_positions_on_every_layer,
    check_model_padding_side_and_incremental_decoding,
    run,
)

# in the worker of test_flex_attention (its group): the flex forms compiled there are compiled once
pytestmark = pytest.mark.xdist_group("flex_eager")


def test_alibi_slopes_follow_the_paper():
    from fairseq_attn_core.pieces.alibi import alibi_slopes

    # power of two: 2^(-8h/H), h = 1..H
    assert alibi_slopes(8) == pytest.approx([2.0 ** -e for e in range(1, 9)])
    assert alibi_slopes(4) == pytest.approx([2.0 ** -e for e in (2, 4, 6, 8)])
    assert alibi_slopes(16) == pytest.approx([2.0 ** (-e / 2) for e in range(1, 17)])
    # otherwise: the slopes of the largest power of two n < H, then every other slope of 2n heads
    assert alibi_slopes(12) == pytest.approx([2.0 ** -e for e in range(1, 9)]
                                             + [2.0 ** -e for e in (0.5, 1.5, 2.5, 3.5)])
    assert alibi_slopes(6) == pytest.approx([2.0 ** -e for e in (2, 4, 6, 8)] + [2.0 ** -1, 2.0 ** -3])


@pytest.mark.parametrize("backend", ["fused", "flex"])  # explicit == fused: the registry tests
@pytest.mark.parametrize("side, causal, left_pad", CASES)
def test_alibi_matches_linear_penalty(side, causal, left_pad, backend):
    attn = make_attention(make_args("alibi"), side=side, backend=backend).eval()  # 4 heads
    slopes = [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8]
    x, kpm = padded_batch([7, 4], left_pad=left_pad)
    q, k, v = projections64(attn, x)
    ref = output64(attn, alibi64(q, k, v, slopes, attn.scaling, kpm, causal=causal)[0])
    assert_close(run(attn, x, kpm, causal), ref, rtol=1e-5, atol=1e-5)
    assert (path_name(attn) == "flex piece") == (backend == "flex")


def test_alibi_flex_path_decodes_incrementally():
    """The flex path offsets query positions during cached decoding (CPU: forward only,
    flex_attention has no CPU backward; the CUDA kernel is checked by the benchmark)."""
    flex = make_attention(make_args("alibi"), side="decoder", backend="flex").eval()
    fused = make_attention(make_args("alibi"), side="decoder", backend="fused").eval()
    x, _ = padded_batch([6, 6], left_pad=False)
    with torch.no_grad():
        steps = incremental_outputs(flex, x).double()
    assert_close(steps, run(fused, x, None, True), rtol=1e-5, atol=1e-5)


def test_architecture_replaces_token_positions_on_every_layer():
    check_architectures_replace_token_positions_on_every_layer("alibi")


def test_model_padding_side_and_incremental_decoding():
    check_model_padding_side_and_incremental_decoding("alibi")


# ---------------------------------------------------------------------------
def test_alibi_flex_float64_matches_plain_reference_at_twelve_heads():
    from fairseq_attn_core.pieces.alibi import alibi_slopes

    heads = 12  # not a power of two: the paper's interleaved slopes, 2^-0.5 among them
    # (no float32 number equals them: a float32 slope shows at these tolerances)
    args = make_args("alibi", heads=heads)
    flex = make_attention(args, embed_dim=24, num_heads=heads, backend="flex",
                          dtype=torch.float64).eval()
    fused = make_attention(args, embed_dim=24, num_heads=heads, backend="fused",
                           dtype=torch.float64).eval()
    piece = flex.pieces[0]
    slopes = -piece.distance_terms().bias(torch.tensor([1]), torch.float64)[:, 0]  # -m_h |1|
    assert slopes.dtype == torch.float64
    assert slopes.tolist() == alibi_slopes(heads)  # the float64 values themselves, not rounded
    x, kpm = padded_batch([5, 3], embed_dim=24, dtype=torch.float64)
    with torch.no_grad():
        out_flex = flex(x, x, x, key_padding_mask=kpm, need_weights=False)[0]
        out_fused = fused(x, x, x, key_padding_mask=kpm, need_weights=False)[0]
        q, k, v = projections64(flex, x)
        ref = output64(flex, alibi64(q, k, v, alibi_slopes(heads), flex.scaling, kpm)[0])
    assert path_name(flex) == "flex piece"
    real = ~kpm.t()[:, :, None]
    assert_close(out_flex * real, ref * real, rtol=1e-12, atol=1e-12)
    assert_close(out_fused * real, ref * real, rtol=1e-12, atol=1e-12)


def test_alibi_flex_slopes_follow_the_model_dtype():
    """fp16/bf16/fp32 models compute the penalty in float32, a float64 one in float64
    (the score bias of the other paths does the same)."""
    attn = make_attention(make_args("alibi"))
    piece = attn.pieces[0]
    for dtype, want in ((torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                        (torch.float32, torch.float32), (torch.float64, torch.float64)):
        assert piece.distance_terms().bias(torch.tensor([1]), dtype).dtype == want
