"""The piece localsoft (Local_Soft, Yang et al. 2018): the Gaussian bias whose centre and
width a predictor gives per head, against a float64 loop reference (fused and explicit,
left and right padding), and the floor that keeps the bias finite in fp16."""

import pytest
import torch
from torch.testing import assert_close

from locality_helpers import attention, check_bias_piece, predictor64
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



def test_gaussian_bias_is_floored_and_stays_finite_in_fp16():
    from fairseq_attn_core.gaussian_localness import BIAS_FLOOR, gaussian_bias

    centre = torch.tensor([[[0.0]]])  # (1, T=1, n=1)
    width = torch.tensor([[[0.1]]])
    pos_k = torch.tensor([[0, 1, 200]])
    bias = gaussian_bias(centre, width, pos_k)  # (1, 1, 1, 3)
    assert_close(bias[0, 0, 0, :2], torch.tensor([0.0, -200.0]))
    assert float(bias[0, 0, 0, 2]) == BIAS_FLOOR  # -2 * 200^2 / 0.01 = -8e6 without the floor
    assert torch.isfinite(bias.half()).all()
