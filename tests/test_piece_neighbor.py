"""The piece neighbor (Sperber et al. 2018): float64 loop references (left and right padding,
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

@pytest.mark.parametrize("std_param", ["square", "plain"])
@pytest.mark.parametrize("backend", ["explicit", "fused"])
def test_neighbor_soft_matches_loop_reference(std_param, backend):
    attn = attention("neighbor", backend, neighbor_layers="0", neighbor_init_std=2.0,
                     neighbor_std_param=std_param)
    piece = attn.pieces[0]
    with torch.no_grad():
        piece.sigma.copy_(torch.tensor([0.7, 1.3, 2.0, 3.1]))  # a different std per head

    def bias_of(q, kpm):
        def bias(b, h, i, j):
            s = float(piece.sigma[h]) ** 2 if std_param == "square" else float(piece.sigma[h])
            pos = sentence_positions(kpm[b])
            return -((pos[i] - pos[j]) ** 2) / (2 * s ** 2)
        return bias

    check_bias_piece(attn, bias_of)


def test_neighbor_initial_std():
    for std_param in ("square", "plain"):
        piece = attention("neighbor", neighbor_layers="0", neighbor_init_std=5.0,
                          neighbor_std_param=std_param).pieces[0]
        assert_close(piece.std(), torch.full((4,), 5.0, dtype=torch.float64))


@pytest.mark.parametrize("backend", ["explicit", "fused"])
def test_neighbor_predicted_matches_loop_reference(backend):
    attn = attention("neighbor", backend, neighbor_layers="0", neighbor_mode="predicted", neighbor_heads=2)
    pred = attn.pieces[0].predictor
    H, n_l = attn.num_heads, 2

    def bias_of(q, kpm):
        def bias(b, h, i, j):
            if h < H - n_l:
                return 0.0
            pos = sentence_positions(kpm[b])
            n = sum(p >= 0 for p in pos)
            width = float(predictor64(pred, q, b, i)[h - (H - n_l)]) * n + 0.1
            return -2.0 * (pos[i] - pos[j]) ** 2 / width ** 2
        return bias

    check_bias_piece(attn, bias_of)

def test_lower_layers_of_the_encoder_only():
    check_lower_layers_of_the_encoder_only("neighbor")


def test_incremental_decoding_is_refused():
    check_incremental_decoding_is_refused("neighbor", dict(neighbor_layers="0"))


@pytest.mark.parametrize("flags, flag", [
    (dict(neighbor_mode="hard"), "--neighbor-mode"),
    (dict(neighbor_init_std=-1.0), "--neighbor-init-std"),
    (dict(neighbor_init_std=float("inf")), "--neighbor-init-std"),
    (dict(neighbor_std_param="log"), "--neighbor-std-param"),
    (dict(neighbor_heads=9), "--neighbor-heads"),
])
def test_bad_flags_name_the_flag(flags, flag):
    with pytest.raises(PieceConfigError, match=flag):
        make_args("neighbor", **flags)


def test_parameter_delta_at_base_size_matches_the_formula():
    check_parameter_deltas("neighbor")


@pytest.fixture(scope="module")
def data_dir():
    return make_data_dir()


@pytest.mark.e2e
def test_train_resume_through_user_dir(data_dir, tmp_path, caplog):
    """The architecture resumes from checkpoint_last.pt (the piece's weights restored) after
    fairseq-train stopped; generation is covered by test_e2e_cli."""
    check_train_resume("neighbor", data_dir, tmp_path, caplog)
