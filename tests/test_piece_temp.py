"""Learnable temperature (temp): loop reference, padding, neutral, fused, grads, incremental."""

import pytest
import torch

from attn_helpers import make_args, make_attention, output64, padded_batch, projections64, path_name
from piece_refs import (
    assert_gradients_reach,
    assert_incremental_equals_full,
    assert_padding_invariant,
    loop_apply64,
    loop_probs64,
)


def temp_attention(backend="explicit", side="encoder", **flags):
    flags.setdefault("temp_layers", "0")
    flags.setdefault("temp_sides", "both")
    attn = make_attention(make_args("temp", **flags), side=side, backend=backend)
    piece = attn.pieces[0]
    with torch.no_grad():  # away from the neutral init so that every scalar matters
        piece.tau_q.copy_(torch.tensor([0.5, 1.5, 2.0, -1.0]))
        piece.tau_k.copy_(torch.tensor([1.2, 0.3, 0.8, 2.5]))
        piece.tau_v.copy_(torch.tensor([0.7, -0.4, 1.1, 3.0]))
    return attn


def reference(attn, x, kpm):
    piece = attn.pieces[0]
    q, k, v = projections64(attn, x)
    H = attn.num_heads
    for h in range(H):
        q[:, h] *= float(piece.tau_q[h])
        k[:, h] *= float(piece.tau_k[h])
        v[:, h] *= float(piece.tau_v[h])
    return output64(attn, loop_apply64(loop_probs64(q, k, kpm), v))


@pytest.mark.parametrize("backend", ["explicit", "fused"])
def test_matches_loop_reference(backend):
    attn = temp_attention(backend).double()
    x, kpm = padded_batch([5, 3], dtype=torch.float64)
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    ref = reference(attn, x, kpm)
    real = ~kpm.t()
    torch.testing.assert_close(y[real], ref[real])


def test_padding_invariance_left_and_right():
    assert_padding_invariant(temp_attention(), [5, 2, 4])


def test_init_is_baseline():
    x, kpm = padded_batch([4, 3])
    attn = make_attention(make_args("temp", temp_layers="0"))
    base = make_attention(make_args(""))
    for name in ("tau_q", "tau_k", "tau_v"):
        torch.testing.assert_close(getattr(attn.pieces[0], name), torch.ones(4))
    y, _ = attn(x, x, x, key_padding_mask=kpm)
    y0, _ = base(x, x, x, key_padding_mask=kpm)
    torch.testing.assert_close(y, y0)


def test_fused_equals_explicit():
    x, kpm = padded_batch([5, 3])
    yf, _ = temp_attention("fused")(x, x, x, key_padding_mask=kpm, need_weights=False)
    ye, _ = temp_attention("explicit")(x, x, x, key_padding_mask=kpm, need_weights=False)
    assert path_name(temp_attention("auto")) == "fused"
    torch.testing.assert_close(yf, ye, rtol=1e-5, atol=1e-5)


def test_gradients_reach_every_scalar():
    assert_gradients_reach(temp_attention(), [4, 3], "tau_q", "tau_k", "tau_v")


def test_incremental_decoding_equals_full_forward():
    attn = temp_attention(side="decoder").eval()
    assert_incremental_equals_full(attn)


def test_layers_and_sides():
    args = make_args("temp", temp_layers="1", temp_sides="encoder")
    assert not make_attention(args, layer_idx=0).pieces
    assert len(make_attention(args, layer_idx=1).pieces) == 1
    assert not make_attention(args, side="decoder", layer_idx=1).pieces
