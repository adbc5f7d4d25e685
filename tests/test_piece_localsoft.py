"""The piece localsoft (Local_Soft, Yang et al. 2018): float64 loop references (left and right padding,
fused and explicit), the layers it covers, its flag errors, its parameter delta at base
size and a train/resume run through --user-dir (e2e)."""


import pytest
import torch
from torch.testing import assert_close

from attn_helpers import make_args
from fairseq_attn_plugins.attention import PieceConfigError
from locality_helpers import (
    attention,
    check_bias_piece,
    check_incremental_decoding_is_refused,
    check_lower_layers_of_the_encoder_only,
    check_parameter_deltas,
    check_train_resume,
    make_data_dir,
    predictor64,
)
from piece_refs import sentence_positions

@pytest.mark.parametrize("backend", ["explicit", "fused"])
def test_localsoft_matches_loop_reference(backend):
    attn = attention("localsoft", backend, localsoft_layers="0")
    pred = attn.pieces[0].predictor
    H = attn.num_heads

    def bias_of(q, kpm):
        def bias(b, h, i, j):
            pos = sentence_positions(kpm[b])
            n = sum(p >= 0 for p in pos)
            y = predictor64(pred, q, b, i)
            centre = float(y[h]) * (n - 1)
            width = float(y[H + h]) * n + 0.1
            return -2.0 * (centre - pos[j]) ** 2 / width ** 2
        return bias

    check_bias_piece(attn, bias_of)

def test_lower_layers_of_the_encoder_only():
    check_lower_layers_of_the_encoder_only("localsoft")


def test_incremental_decoding_is_refused():
    check_incremental_decoding_is_refused("localsoft", dict(localsoft_layers="0"))


@pytest.mark.parametrize("flags, flag", [
    (dict(localsoft_layers="6"), "--localsoft-layers"),
])
def test_bad_flags_name_the_flag(flags, flag):
    with pytest.raises(PieceConfigError, match=flag):
        make_args("localsoft", **flags)


def test_parameter_delta_at_base_size_matches_the_formula():
    check_parameter_deltas("localsoft")


@pytest.fixture(scope="module")
def data_dir():
    return make_data_dir()


@pytest.mark.e2e
def test_train_resume_through_user_dir(data_dir, tmp_path, caplog):
    """The architecture resumes from checkpoint_last.pt (the piece's weights restored) after
    fairseq-train stopped; generation is covered by test_e2e_cli."""
    check_train_resume("localsoft", data_dir, tmp_path, caplog)


def test_gaussian_bias_is_floored_and_stays_finite_in_fp16():
    from fairseq_attn_plugins.attention.gaussian_localness import BIAS_FLOOR, gaussian_bias

    centre = torch.tensor([[[0.0]]])  # (1, T=1, n=1)
    width = torch.tensor([[[0.1]]])
    pos_k = torch.tensor([[0, 1, 200]])
    bias = gaussian_bias(centre, width, pos_k)  # (1, 1, 1, 3)
    assert_close(bias[0, 0, 0, :2], torch.tensor([0.0, -200.0]))
    assert float(bias[0, 0, 0, 2]) == BIAS_FLOOR  # -2 * 200^2 / 0.01 = -8e6 without the floor
    assert torch.isfinite(bias.half()).all()
