"""Chained self-attention (chained): loop reference, padding, K=1 baseline, backends,
grads, encoder-only, conflicts and a combination."""

import pytest
import torch

from attn_helpers import make_args, make_attention, output64, padded_batch, projections64
from fairseq_attn_plugins.attention import PieceConfigError
from piece_refs import assert_padding_invariant, loop_chain64, loop_probs64


def chained_attention(k=3, backend="explicit", pieces="chained", **flags):
    flags.setdefault("chained_layers", "0")
    return make_attention(make_args(pieces, chained_k=k, **flags), backend=backend)


def chained_reference(attn, probs, v, k):
    return output64(attn, loop_chain64(probs, v, k, attn.pieces[0].w_attn.weight.double()))


@pytest.mark.parametrize("left", [True, False])
def test_matches_loop_reference(left):
    k = 3
    attn = chained_attention(k).double()
    x, kpm = padded_batch([4, 2], left_pad=left, dtype=torch.float64)
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    q, kk, v = projections64(attn, x)
    ref = chained_reference(attn, loop_probs64(q, kk, kpm), v, k)
    real = ~kpm.t()
    torch.testing.assert_close(y[real], ref[real])


def test_padding_invariance_left_and_right():
    assert_padding_invariant(chained_attention(4), [5, 2, 4])


def test_k1_with_identity_projection_is_baseline():
    x, kpm = padded_batch([5, 3])
    attn = chained_attention(1)
    with torch.no_grad():
        attn.pieces[0].w_attn.weight.copy_(torch.eye(16))
    base = make_attention(make_args(""), backend="explicit")
    attn.load_state_dict(base.state_dict(), strict=False)  # same q/k/v/out projections
    y, _ = attn(x, x, x, key_padding_mask=kpm)
    y0, _ = base(x, x, x, key_padding_mask=kpm)
    torch.testing.assert_close(y, y0)


def test_first_init_starts_as_baseline_for_any_k():
    x, kpm = padded_batch([5, 3])
    attn = chained_attention(4, chained_init="first")
    base = make_attention(make_args(""))
    attn.load_state_dict(base.state_dict(), strict=False)
    y, _ = attn(x, x, x, key_padding_mask=kpm)
    y0, _ = base(x, x, x, key_padding_mask=kpm)
    torch.testing.assert_close(y, y0)


def test_explicit_path_only():
    assert not chained_attention(2, backend="auto").uses_fused_path()
    with pytest.raises(PieceConfigError, match="fused"):
        make_args("chained", attn_backend="fused")


def test_gradients_reach_w_attn():
    attn = chained_attention(3)
    x, kpm = padded_batch([4, 3])
    y, _ = attn(x, x, x, key_padding_mask=kpm)
    y.pow(2).sum().backward()
    assert bool((attn.pieces[0].w_attn.weight.grad != 0).all())
    assert attn.q_proj.weight.grad is not None and bool(attn.q_proj.weight.grad.abs().sum() > 0)


def test_encoder_only():
    args = make_args("chained")
    assert (args.chained_k, args.chained_layers) == (4, "all")
    assert len(make_attention(args, layer_idx=1).pieces) == 1
    assert not make_attention(args, side="decoder").pieces


def test_conflicts_with_csan2d():
    with pytest.raises(PieceConfigError, match="chained.*csan2d|csan2d.*chained"):
        make_args("chained,csan2d")


def test_combines_with_csan1d_window():
    k, half = 2, 1
    attn = chained_attention(k, pieces="chained,csan1d", csan_layers="0", csan_window=3).double()
    x, kpm = padded_batch([5, 3], dtype=torch.float64)
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    q, kk, v = projections64(attn, x)

    def window(b, h, i, j):
        return 0.0 if abs(i - j) <= half else float("-inf")

    ref = chained_reference(attn, loop_probs64(q, kk, kpm, window), v, k)
    real = ~kpm.t()
    torch.testing.assert_close(y[real], ref[real])


@pytest.mark.parametrize("flags, flag", [
    ({"chained_k": 0}, "--chained-k"),
    ({"chained_k": 17}, "--chained-k"),
    ({"chained_layers": "2"}, "--chained-layers"),
    ({"chained_init": "ones"}, "--chained-init"),
])
def test_bad_flags_name_the_flag(flags, flag):
    with pytest.raises(PieceConfigError, match=flag):
        make_args("chained", **flags)
