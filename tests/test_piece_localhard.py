"""The piece localhard (Local_Hard of the CSAN authors, after Luong et al. 2015 local-p):
its Gaussian around a predicted centre on the last heads, against a float64 loop reference,
fused and explicit, left and right padding."""

import pytest

from locality_helpers import attention, check_bias_piece, predictor64
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
