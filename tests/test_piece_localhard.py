"""The piece localhard (Luong et al. 2015 local-p, the CSAN authors' Local_Hard): float64 loop references (left and right padding,
fused and explicit), the layers it covers, its flag errors, its parameter delta at base
size and a train/resume run through --user-dir (e2e)."""


import pytest

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
def test_localhard_matches_loop_reference(backend):
    attn = attention("localhard", backend, localhard_layers="0", localhard_heads=3, localhard_window=3.0)
    pred = attn.pieces[0].predictor
    H, n_l = attn.num_heads, 3

    def bias_of(q, kpm):
        def bias(b, h, i, j):
            if h < H - n_l:  # the first H - n_l heads are not localized
                return 0.0
            pos = sentence_positions(kpm[b])
            n = sum(p >= 0 for p in pos)
            centre = float(predictor64(pred, q, b, i)[h - (H - n_l)]) * (n - 1)
            return -2.0 * (centre - pos[j]) ** 2 / 3.0 ** 2
        return bias

    check_bias_piece(attn, bias_of)

def test_lower_layers_of_the_encoder_only():
    check_lower_layers_of_the_encoder_only("localhard")


def test_incremental_decoding_is_refused():
    check_incremental_decoding_is_refused("localhard", dict(localhard_layers="0", localhard_heads=2))


@pytest.mark.parametrize("flags, flag", [
    (dict(localhard_heads=5), "--localhard-heads"),
    (dict(localhard_heads=0), "--localhard-heads"),
    (dict(localhard_window=0.0), "--localhard-window"),
    (dict(localhard_window="ten"), "--localhard-window"),
])
def test_bad_flags_name_the_flag(flags, flag):
    with pytest.raises(PieceConfigError, match=flag):
        make_args("localhard", **flags)


def test_parameter_delta_at_base_size_matches_the_formula():
    check_parameter_deltas("localhard")


@pytest.fixture(scope="module")
def data_dir():
    return make_data_dir()


@pytest.mark.e2e
def test_train_resume_through_user_dir(data_dir, tmp_path, caplog):
    """The architecture resumes from checkpoint_last.pt (the piece's weights restored) after
    fairseq-train stopped; generation is covered by test_e2e_cli."""
    check_train_resume("localhard", data_dir, tmp_path, caplog)
