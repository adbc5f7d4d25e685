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


def test_localhard_head_probabilities_match_loop_reference():
    """Per head (the output check above averages them through v): the first H - n_l heads are
    plain attention, the last n_l carry the Gaussian around their own predicted centre."""
    import torch
    from attn_helpers import padded_batch, projections64
    from piece_refs import loop_probs64

    attn = attention("localhard", "explicit", localhard_layers="0", localhard_heads=2, localhard_window=2.0)
    pred = attn.pieces[0].predictor
    H, n_l = attn.num_heads, 2
    x, kpm = padded_batch([6, 3, 5], left_pad=False, dtype=torch.float64)
    _, weights = attn(x, x, x, key_padding_mask=kpm, need_head_weights=True)  # (H, B, T, S)
    q, k, _ = projections64(attn, x)

    def bias(b, h, i, j):
        if h < H - n_l:
            return 0.0
        pos = sentence_positions(kpm[b])
        centre = float(predictor64(pred, q, b, i)[h - (H - n_l)]) * (sum(p >= 0 for p in pos) - 1)
        return -2.0 * (centre - pos[j]) ** 2 / 2.0 ** 2

    want = torch.tensor(loop_probs64(q, k, kpm, bias), dtype=torch.float64).permute(1, 0, 2, 3)
    real = ~kpm  # (B, T): rows of real queries
    for b in range(real.size(0)):
        rows = real[b]
        # the weights come back in float32 (fairseq's convention), the math in float64
        torch.testing.assert_close(weights[:, b][:, rows].double(), want[:, b][:, rows], rtol=1e-6, atol=1e-7)
