"""The piece neighbor (Sperber et al. 2018): the learned per-head standard deviation and
the predicted width of the neighbourhood Gaussian, each against a float64 loop reference
(fused and explicit, left and right padding), and the initial deviation."""

import pytest
import torch
from torch.testing import assert_close

from locality_helpers import attention, check_bias_piece, predictor64
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
