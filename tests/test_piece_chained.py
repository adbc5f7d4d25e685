"""Chained self-attention (chained): a float64 loop reference of Gupta's per-head shared
W_attn (and of the dense option), padding, K=1 baseline, backends, grads, sides,
exact incremental decoding in the decoder (with beam reordering), conflicts and a
combination."""

import math

import pytest
import torch

from attn_helpers import make_args, make_attention, output64, padded_batch, projections64, path_name
from fairseq_attn_core import PieceConfigError
from piece_refs import assert_padding_invariant, loop_chain64, loop_probs64


def chained_attention(k=3, backend="explicit", pieces="chained", side="encoder", seed=0, **flags):
    flags.setdefault("chained_layers", "0")
    if side == "decoder":
        flags.setdefault("chained_sides", "decoder")
    return make_attention(make_args(pieces, chained_k=k, **flags), backend=backend, side=side, seed=seed)


def gupta_reference(attn, x, kpm, k, causal=False):
    """Gupta 2019 §3.2 written out in float64: per head P = softmax(q k^T / sqrt(d)) over
    real (and, in the decoder, earlier) keys, Att^1 = P V, Att^n = P Att^{n-1}, then
    Att = [Att^1 .. Att^K] W_attn with one W_attn (K*D x D) shared by the heads, then
    the heads concatenated and fairseq's out_proj. Returns (T, B, C)."""
    q, kk, v = projections64(attn, x)
    B, H, T, D = q.shape
    w_attn = attn.pieces[0].w_attn.weight.double().t()  # (K*D, D), the paper's W_attn
    heads = torch.zeros(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            P = [[0.0] * T for _ in range(T)]
            for i in range(T):
                keys = [j for j in range(T) if not bool(kpm[b, j]) and not (causal and j > i)]
                if not keys:
                    continue
                e = {j: float(q[b, h, i] @ kk[b, h, j]) / math.sqrt(D) for j in keys}
                m = max(e.values())
                z = sum(math.exp(s - m) for s in e.values())
                for j in keys:
                    P[i][j] = math.exp(e[j] - m) / z
            att = [[sum(P[i][j] * v[b, h, j] for j in range(T)) for i in range(T)]]
            for _ in range(k - 1):
                prev = att[-1]
                att.append([sum(P[i][j] * prev[j] for j in range(T)) for i in range(T)])
            for i in range(T):
                concat = torch.cat([att[n][i] for n in range(k)])  # (K*D,)
                for d in range(D):
                    heads[b, h, i, d] = sum(float(concat[r]) * float(w_attn[r, d]) for r in range(k * D))
    return output64(attn, heads)


@pytest.mark.parametrize("left", [True, False])
def test_shared_w_attn_matches_gupta_loop_reference(left):
    k = 3
    attn = chained_attention(k).double()
    assert tuple(attn.pieces[0].w_attn.weight.shape) == (4, 3 * 4)  # (D, K*D): one for all heads
    x, kpm = padded_batch([4, 2], left_pad=left, dtype=torch.float64)
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    ref = gupta_reference(attn, x, kpm, k)
    real = ~kpm.t()
    torch.testing.assert_close(y[real], ref[real])


@pytest.mark.parametrize("left", [True, False])
def test_dense_option_matches_loop_reference(left):
    k = 3
    attn = chained_attention(k, chained_w_attn="dense").double()
    assert tuple(attn.pieces[0].w_attn.weight.shape) == (16, 4 * 3 * 4)  # (C, H*K*D)
    x, kpm = padded_batch([4, 2], left_pad=left, dtype=torch.float64)
    y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    q, kk, v = projections64(attn, x)
    ref = output64(attn, loop_chain64(loop_probs64(q, kk, kpm), v, k, attn.pieces[0].w_attn.weight.double()))
    real = ~kpm.t()
    torch.testing.assert_close(y[real], ref[real])


@pytest.mark.parametrize("form", ["shared", "dense"])
def test_padding_invariance_left_and_right(form):
    assert_padding_invariant(chained_attention(4, chained_w_attn=form), [5, 2, 4])


@pytest.mark.parametrize("form, eye", [("shared", 4), ("dense", 16)])
def test_k1_with_identity_projection_is_baseline(form, eye):
    x, kpm = padded_batch([5, 3])
    attn = chained_attention(1, chained_w_attn=form)
    with torch.no_grad():
        attn.pieces[0].w_attn.weight.copy_(torch.eye(eye))
    base = make_attention(make_args(""), backend="explicit")
    attn.load_state_dict(base.state_dict(), strict=False)  # same q/k/v/out projections
    y, _ = attn(x, x, x, key_padding_mask=kpm)
    y0, _ = base(x, x, x, key_padding_mask=kpm)
    torch.testing.assert_close(y, y0)


@pytest.mark.parametrize("form", ["shared", "dense"])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_first_init_starts_as_baseline_for_any_k(form, side):
    x, kpm = padded_batch([5, 3], left_pad=side == "encoder")
    causal = torch.triu(torch.full((5, 5), float("-inf")), 1) if side == "decoder" else None
    attn = chained_attention(4, chained_init="first", chained_w_attn=form, side=side)
    base = make_attention(make_args(""), side=side)
    attn.load_state_dict(base.state_dict(), strict=False)
    y, _ = attn(x, x, x, key_padding_mask=kpm, attn_mask=causal)
    y0, _ = base(x, x, x, key_padding_mask=kpm, attn_mask=causal)
    torch.testing.assert_close(y, y0)


def test_new_parameters_follow_the_formula():
    # K D^2 shared by the heads (Gupta: one 4k x k matrix) vs C H K D dense
    for form, expected in (("shared", 3 * 4 * 4), ("dense", 16 * 4 * 3 * 4)):
        attn = chained_attention(3, chained_w_attn=form)
        assert sum(p.numel() for p in attn.pieces[0].parameters()) == expected
    # per base layer (C = 512, H = 8, D = 64, K = 4): K D^2 and C H K D
    for form, expected in (("shared", 4 * 64 * 64), ("dense", 512 * 8 * 4 * 64)):
        args = make_args("chained", chained_k=4, chained_layers="0", chained_w_attn=form, heads=8)
        base = make_attention(args, embed_dim=512, num_heads=8)
        assert sum(p.numel() for p in base.pieces[0].parameters()) == expected
    assert (4 * 64 * 64, 512 * 8 * 4 * 64) == (16_384, 1_048_576)


def test_explicit_path_only():
    assert path_name(chained_attention(2, backend="auto")) == "explicit"
    with pytest.raises(PieceConfigError, match="fused"):
        make_args("chained", attn_backend="fused")


@pytest.mark.parametrize("form", ["shared", "dense"])
def test_gradients_reach_w_attn(form):
    attn = chained_attention(3, chained_w_attn=form)
    x, kpm = padded_batch([4, 3])
    y, _ = attn(x, x, x, key_padding_mask=kpm)
    y.pow(2).sum().backward()
    assert bool((attn.pieces[0].w_attn.weight.grad != 0).all())
    assert attn.q_proj.weight.grad is not None and bool(attn.q_proj.weight.grad.abs().sum() > 0)


def test_sides_default_encoder_and_decoder_on_request():
    args = make_args("chained")
    assert (args.chained_k, args.chained_layers, args.chained_sides, args.chained_w_attn) == (
        4, "all", "encoder", "shared")
    assert len(make_attention(args, layer_idx=1).pieces) == 1
    assert not make_attention(args, side="decoder").pieces
    for sides, enc, dec in (("decoder", 0, 1), ("both", 1, 1), ("encoder,decoder", 1, 1)):
        args = make_args("chained", chained_sides=sides)
        assert len(make_attention(args).pieces) == enc
        assert len(make_attention(args, side="decoder").pieces) == dec


def test_decoder_full_pass_matches_causal_loop_reference():
    k = 3
    attn = chained_attention(k, side="decoder").double()
    x, kpm = padded_batch([5, 3], left_pad=False, dtype=torch.float64)  # fairseq right-pads targets
    causal = torch.triu(torch.full((5, 5), float("-inf"), dtype=torch.float64), 1)
    y, _ = attn(x, x, x, key_padding_mask=kpm, attn_mask=causal, need_weights=False)
    ref = gupta_reference(attn, x, kpm, k, causal=True)
    real = ~kpm.t()
    torch.testing.assert_close(y[real], ref[real])


@pytest.mark.parametrize("form", ["shared", "dense"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_incremental_decoding_equals_full_pass_float64(form, k):
    attn = chained_attention(k, chained_w_attn=form, side="decoder").double().eval()
    T = 7
    x, _ = padded_batch([T, T, T], left_pad=False, dtype=torch.float64)
    causal = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), 1)
    full, _ = attn(x, x, x, attn_mask=causal, need_weights=False)
    if form == "shared":
        ref = gupta_reference(attn, x, torch.zeros(3, T, dtype=torch.bool), k, causal=True)
        torch.testing.assert_close(full, ref, rtol=1e-6, atol=1e-6)  # the core's softmax is float32
    state, steps = {}, []
    for t in range(T):
        step = x[t:t + 1]
        out, _ = attn(step, step, step, incremental_state=state, need_weights=False)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps), full, rtol=1e-12, atol=1e-12)
    if k > 1:  # the cache holds orders 1..K-1 of every decoded position
        buffer = attn._get_input_buffer(state)
        assert sorted(n for n in buffer if n.startswith("chained_z")) == [f"chained_z{n}" for n in range(1, k)]
        assert buffer["chained_z1"].shape == (3, 4, T, 4)


def test_incremental_cache_follows_beam_reordering():
    """fairseq reorders the layer's buffer (beam search): continuing with reordered
    sentences gives the full pass of the reordered sentences."""
    attn = chained_attention(3, side="decoder").double().eval()
    T, split = 6, 3
    x, _ = padded_batch([T, T, T], left_pad=False, dtype=torch.float64)
    order = torch.tensor([2, 0, 0])  # a beam drops sentence 1 and duplicates sentence 0
    y = torch.cat([x[:split], x[split:, order]])  # steps fed before / after the reordering
    causal = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), 1)
    xo = x[:, order]  # what the reordered hypotheses have seen in full
    full, _ = attn(xo, xo, xo, attn_mask=causal, need_weights=False)
    state, steps = {}, []
    for t in range(T):
        if t == split:
            attn.reorder_incremental_state(state, order)
        step = y[t:t + 1]
        out, _ = attn(step, step, step, incremental_state=state, need_weights=False)
        steps.append(out)
    steps = torch.cat(steps)
    torch.testing.assert_close(steps[:split, order], full[:split], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(steps[split:], full[split:], rtol=1e-12, atol=1e-12)


def test_incremental_step_without_its_cache_fails_clearly():
    attn = chained_attention(2, side="decoder").eval()
    x, _ = padded_batch([3, 3], left_pad=False)
    state = {}
    attn(x[:1], x[:1], x[:1], incremental_state=state)
    buffer = attn._get_input_buffer(state)
    del buffer["chained_z1"]
    with pytest.raises(RuntimeError, match="cache of order 1"):
        attn(x[1:2], x[1:2], x[1:2], incremental_state=state)


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

    ref = output64(attn, loop_chain64(loop_probs64(q, kk, kpm, window), v, k,
                                      attn.pieces[0].w_attn.weight.double()))
    real = ~kpm.t()
    torch.testing.assert_close(y[real], ref[real])


@pytest.mark.parametrize("form", ["shared", "dense"])
def test_model_with_chained_encoder_and_decoder_decodes_incrementally_exactly(form):
    """Whole model, float64, chained on every encoder and decoder layer: step-by-step
    decoding (left-padded source batch) equals the teacher-forced full decoder pass."""
    from attn_helpers import assert_decoder_steps_equal_full, build_model, token_batch

    model, task, args = build_model("transformer_chained_wmt_en_de",
                                    extra=["--chained-sides", "both", "--chained-k", "3",
                                           "--chained-w-attn", form])
    assert all(layer.self_attn.pieces for layer in model.decoder.layers)
    assert all(layer.self_attn.pieces for layer in model.encoder.layers)
    model = model.double().eval()
    d = task.target_dictionary
    src, lengths = token_batch([6, 3, 5], d)
    prev, _ = token_batch([5, 5, 5], d, left_pad=False, seed=7)
    prev = torch.cat([torch.full((3, 1), d.eos()), prev[:, :-1]], dim=1)
    assert_decoder_steps_equal_full(model, src, lengths, prev, rtol=1e-10, atol=1e-10)


def test_dense_checkpoint_into_shared_model_names_the_flag():
    dense = chained_attention(4, chained_w_attn="dense")
    shared = chained_attention(4)
    with pytest.raises(RuntimeError, match="--chained-w-attn dense.*model-overrides"):
        shared.load_state_dict(dense.state_dict())
    again = chained_attention(4, chained_w_attn="dense", seed=5)
    assert not torch.equal(again.pieces[0].w_attn.weight, dense.pieces[0].w_attn.weight)  # another draw
    again.load_state_dict(dense.state_dict())
    torch.testing.assert_close(again.pieces[0].w_attn.weight, dense.pieces[0].w_attn.weight)
