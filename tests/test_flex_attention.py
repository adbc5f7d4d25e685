"""The flex_attention paths (fairseq_attn_core/backends/flex.py, flex_forms.py) against the explicit path, float64 on CPU.

relpos kv/tied through flex (key term as score_mod, value term from the log-sum-exp) and
block-sparse band masks (1D-/2D-CSAN) must equal the explicit reference forward and
backward: encoder with left and right padding, causal decoder, incremental decoding.

torch 2.13 refuses flex_attention *backward* on CPU with a device check
(``_validate_device``), although its eager (dense, differentiable) implementation
computes it; the ``cpu_flex_backward`` fixture lifts that check for these tests only.
On CUDA the compiled kernel is checked by ``fairseq-attn-bench --mode numerics``.
"""

import pytest
import torch
import torch.nn.attention.flex_attention as torch_flex
from torch.testing import assert_close

from attn_helpers import build_model, make_args, make_attention, padded_batch, path_name, token_batch
from fairseq_attn_core import backends
from distance_refs import shaw64
from fairseq_attn_core.backends import flex
from fairseq_attn_core.backends.distance import flex_forms

# one worker runs them (pytest-xdist --dist loadgroup): torch's eager flex_attention compiles each form (score_mod
# and mask_mod code, dtype, grad mode) once per process, and most tests here share forms; spread over two
# workers, both compiled most of them (a 2-worker run of this file: 40 -> 29 CPU s)
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.xdist_group("flex_eager")]


@pytest.fixture
def cpu_flex_backward(monkeypatch):
    monkeypatch.setattr(torch_flex, "_validate_device", lambda *a: None)


def randomize(module, seed=7):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "rel_" in name:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))


def twin(args, backend, **kw):
    attn = make_attention(args, backend=backend, dtype=torch.float64, **kw)
    randomize(attn)
    return attn


def run(attn, x, kpm, attn_mask=None):
    x = x.detach().clone().requires_grad_(True)
    y, _ = attn(x, x, x, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=False)
    g = torch.Generator().manual_seed(11)
    y.backward(torch.randn(y.shape, generator=g, dtype=y.dtype))
    grads = {n: p.grad.clone() for n, p in attn.named_parameters()}
    return y.detach(), x.grad, grads


# the explicit path takes its softmax in float32 (``dtype=torch.float32``) even for float64
# inputs, so it agrees to ~1e-7 relative only (gradients ~1e-6); the flex algebra itself is checked to float64
# precision against the float64 Shaw reference (test_relpos_attention_matches_the_reference).
TOL = dict(rtol=1e-5, atol=1e-5)


def assert_same_run(a, b):
    ya, xa, ga = a
    yb, xb, gb = b
    assert_close(ya, yb, **TOL)
    assert_close(xa, xb, **TOL)
    assert ga.keys() == gb.keys()
    for n in ga:
        assert_close(ga[n], gb[n], msg=n, **TOL)


# ---------------------------------------------------------------------------
def test_band_scores_match_loops():
    g = torch.Generator().manual_seed(0)
    for B, H, T, S, start, half, block in [(2, 3, 7, 7, 0, 2, 4), (1, 2, 1, 9, 8, 3, 32),
                                           (2, 2, 40, 40, 0, 5, 8), (1, 1, 5, 12, 7, 4, 2)]:
        q = torch.randn(B, H, T, 4, generator=g, dtype=torch.float64)
        k = torch.randn(B, H, S, 4, generator=g, dtype=torch.float64)
        ql, kl = q.tolist(), k.tolist()  # Python floats (float64): the loops index lists, not tensors
        ref = [[[[0.0] * (2 * half + 1) for _ in range(T)] for _ in range(H)] for _ in range(B)]
        for b in range(B):
            for h in range(H):
                for i in range(T):
                    for c, d in enumerate(range(-half, half + 1)):
                        j = start + i + d
                        if 0 <= j < S:
                            ref[b][h][i][c] = sum(ql[b][h][i][x] * kl[b][h][j][x] for x in range(4))
        assert_close(flex_forms.band_scores(q, k, start, half, block), torch.tensor(ref, dtype=torch.float64))


@pytest.mark.parametrize("kmax", [1, 3, 16])
@pytest.mark.parametrize("case", ["left_pad", "right_pad", "causal", "step"])
def test_relpos_attention_matches_the_reference(kmax, case):
    g = torch.Generator().manual_seed(kmax)
    B, H, D = 2, 2, 4
    T, S, start = (1, 8, 7) if case == "step" else (9, 9, 0)
    q = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, H, S, D, generator=g, dtype=torch.float64) for _ in range(2))
    wk, wv = (torch.randn(2 * kmax + 1, D, generator=g, dtype=torch.float64) for _ in range(2))
    kpm = None
    if case in ("left_pad", "right_pad"):
        kpm = torch.zeros(B, S, dtype=torch.bool)
        if case == "left_pad":
            kpm[0, :3] = True
        else:
            kpm[1, 6:] = True
    causal = case == "causal"
    mask = torch.triu(torch.full((T, S), float("-inf"), dtype=torch.float64), 1) if causal else None
    got = flex_forms.clipped_tables_attention(q, k, v, wk, wv, kmax, start, kpm, mask, 0.5)
    assert_close(got, shaw64(q, k, v, wk, wv, kmax, 0.5, kpm, start, causal)[0])


# ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["kv", "tied"])
@pytest.mark.parametrize("left_pad", [True, False])
@pytest.mark.parametrize("kmax", [2, 16])
def test_relpos_flex_equals_explicit_encoder(cpu_flex_backward, mode, left_pad, kmax):
    args = make_args("relpos", relpos_k=kmax, relpos_mode=mode)
    x, kpm = padded_batch([9, 4, 7], left_pad=left_pad, dtype=torch.float64)
    fl, ex = twin(args, "flex").train(), twin(args, "explicit").train()
    assert path_name(fl) == "flex piece"
    assert_same_run(run(fl, x, kpm), run(ex, x, kpm))


@pytest.mark.parametrize("mode", ["kv", "tied"])
def test_relpos_flex_equals_explicit_causal_decoder(cpu_flex_backward, mode):
    args = make_args("relpos", relpos_k=2, relpos_mode=mode)
    x, _ = padded_batch([8, 8], dtype=torch.float64)
    future = torch.triu(torch.full((8, 8), float("-inf"), dtype=torch.float64), 1)
    fl = twin(args, "flex", side="decoder").train()
    ex = twin(args, "explicit", side="decoder").train()
    assert_same_run(run(fl, x, None, future), run(ex, x, None, future))


@pytest.mark.parametrize("mode", ["kv", "tied"])
def test_relpos_flex_incremental_decoding_equals_explicit_full_forward(mode):
    args = make_args("relpos", relpos_k=2, relpos_mode=mode)
    T = 7
    x, _ = padded_batch([T, T], dtype=torch.float64)
    future = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), 1)
    fl = twin(args, "flex", side="decoder").eval()
    ex = twin(args, "explicit", side="decoder").eval()
    with torch.no_grad():
        full, _ = ex(x, x, x, attn_mask=future, need_weights=False)
        state, steps = {}, []
        for t in range(T):
            xt = x[t: t + 1]
            steps.append(fl(xt, xt, xt, incremental_state=state, need_weights=False)[0])
    assert_close(torch.cat(steps), full, **TOL)


def test_relpos_flex_whole_model_loss_and_grads(cpu_flex_backward):
    """transformer_relpos (encoder + causal decoder, k = 16) with --attn-backend flex vs explicit."""
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

    results = []
    for backend in ("flex", "explicit"):
        model, task, _ = build_model("transformer_relpos_wmt_en_de", ["--attn-backend", backend])
        model = model.double().train()
        d = task.source_dictionary
        src, lengths = token_batch([9, 5, 7], d)
        prev, _ = token_batch([6, 6, 3], d, left_pad=False, seed=4)
        out = model(src, lengths, prev)
        lp = model.get_normalized_probs(out, log_probs=True)
        loss, _ = label_smoothed_nll_loss(lp.view(-1, lp.size(-1)), prev.view(-1), 0.1,
                                          ignore_index=d.pad())
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()
                                        if p.grad is not None}))
    (la, ga), (lb, gb) = results
    assert_close(la, lb, **TOL)
    assert ga.keys() == gb.keys() and any("rel_values" in n for n in ga)
    for n in ga:
        assert_close(ga[n], gb[n], msg=n, **TOL)


# ---------------------------------------------------------------------------
@pytest.mark.parametrize("piece,flags", [("csan1d", dict(csan_window=3)),
                                         ("csan2d", dict(csan_window=3, csan_heads=3)),
                                         ("csan2d", dict(csan_window=5, csan_heads=3,
                                                         csan_head_edge="wrap"))])
@pytest.mark.parametrize("left_pad", [True, False])
def test_windowed_flex_equals_explicit(cpu_flex_backward, piece, flags, left_pad):
    args = make_args(piece, csan_layers="0", **flags)
    x, kpm = padded_batch([11, 2, 6], left_pad=left_pad, dtype=torch.float64)
    fl, ex = twin(args, "flex").train(), twin(args, "explicit").train()
    assert path_name(fl, tgt_len=11, src_len=11) == "flex band"
    assert_same_run(run(fl, x, kpm), run(ex, x, kpm))


def test_masked_attention_skips_blocks_outside_the_band():
    """A band of half 8 over 1024 positions: the block mask keeps only near-diagonal blocks."""
    T, half = 1024, 8
    pos = torch.arange(T)
    band = (pos[:, None] - pos[None, :]).abs() <= half
    bm = torch_flex.create_block_mask(lambda b, h, i, j: band[i, j], None, None, T, T)
    dense = bm.to_dense()[0, 0]  # (blocks, blocks) 1 = computed
    nb = T // 128
    expected = torch.tensor([[int(abs(r - c) <= 1) for c in range(nb)] for r in range(nb)])
    assert torch.equal(dense.long(), expected)
    assert int(dense.sum()) == 3 * nb - 2  # instead of nb * nb


# ---------------------------------------------------------------------------
def test_dispatcher_choices():
    kv = make_args("relpos", relpos_k=2)
    auto = make_attention(kv)
    assert path_name(auto) == "explicit"  # CPU: explicit stays
    assert path_name(auto, on_cuda=True) == "flex piece"  # GPU: flex
    assert path_name(auto, on_cuda=True, dropout_p=0.1) == "explicit"  # attention dropout
    assert path_name(auto, on_cuda=True, need_weights=True) == "explicit"  # weights requested
    assert path_name(make_attention(kv, backend="explicit"), on_cuda=True) == "explicit"
    keys_only = make_attention(make_args("relpos", relpos_k=2, relpos_mode="k"), backend="flex")
    assert path_name(keys_only, on_cuda=True) == "fused"  # a score bias: SDPA does it
    csan = make_attention(make_args("csan1d", csan_layers="0"))
    assert path_name(csan, tgt_len=1024, src_len=1024) == "block-local"  # auto on CPU
    assert path_name(csan, tgt_len=1024, src_len=1024, on_cuda=True) == "flex band"
    assert path_name(csan, tgt_len=300, src_len=300, on_cuda=True) == "block-local"
    forced = make_attention(make_args("csan1d", csan_layers="0"), backend="flex")
    assert path_name(forced, tgt_len=16, src_len=16) == "flex band"
    assert path_name(forced, tgt_len=1, src_len=16, incremental=True) == "fused"  # not banded self-attn


def test_flex_backend_refuses_attention_dropout():
    with pytest.raises(ValueError, match="--attention-dropout 0"):
        make_attention(make_args("relpos", relpos_k=2), backend="flex", dropout=0.1)
    with pytest.raises(Exception, match="--attention-dropout"):
        make_args("relpos", relpos_k=2, attn_backend="flex", attention_dropout=0.1)


def test_block_masks_are_reused_only_for_the_same_mask_tensors():
    """Layers sharing one padding mask share one block mask; another tensor (even with the
    same content) or an in-place change gets a fresh one that follows its content."""
    def make(kpm):
        return flex.block_mask(lambda b, h, i, j: ~kpm[b, j], 2, 9, 9, "cpu", ("test",), (kpm,))

    kpm = torch.zeros(2, 9, dtype=torch.bool)
    first = make(kpm)
    assert make(kpm) is first
    other = kpm.clone()
    assert make(other) is not first
    kpm[0, :3] = True  # in place: the version changes
    changed = make(kpm)
    assert changed is not first
    mask = torch_flex.create_mask(changed.mask_mod, 2, 1, 9, 9, device="cpu")  # its element mask
    assert not bool(mask[0, 0, :, :3].any()) and bool(mask[0, 0, :, 3:].all()) and bool(mask[1].all())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled flex kernel needs CUDA")
@pytest.mark.parametrize("piece,flags,side", [("relpos", dict(relpos_k=16), "encoder"),
                                              ("relpos", dict(relpos_k=16), "decoder"),
                                              ("csan2d", dict(csan_layers="0", csan_window=11), "encoder")])
def test_cuda_flex_kernel_matches_explicit_in_fp16(piece, flags, side):
    """GPU only: the compiled Triton kernel (``--attn-backend flex``: auto trains without it)
    vs explicit, fp16, forward and backward, norm-wise."""
    args = make_args(piece, **flags)
    T = 600 if piece == "csan2d" else 70
    x, kpm = padded_batch([T, T - 17, T // 2], embed_dim=64)
    mask = None
    if side == "decoder":
        kpm, mask = None, torch.triu(torch.full((T, T), float("-inf")), 1).cuda().half()
    res = []
    for backend in ("flex", "explicit"):
        attn = make_attention(args, side=side, embed_dim=64, num_heads=4, backend=backend)
        randomize(attn)
        attn = attn.cuda().half().train()
        xc = x.cuda().half().requires_grad_(True)
        y, _ = attn(xc, xc, xc, key_padding_mask=None if kpm is None else kpm.cuda(),
                    attn_mask=mask, need_weights=False)
        y.float().square().mean().backward()
        res.append((y.float(), xc.grad.float()))
    for a, b in zip(res[0], res[1]):
        assert float((a - b).norm() / b.norm()) < 2e-2


def test_auto_trains_on_cuda_without_flex():
    """auto on CUDA: the flex paths run inference calls only; a training call (the module
    trains, gradients recorded) takes the SDPA / explicit paths, which trained on the GPU.
    ``--attn-backend flex`` still trains through flex."""
    kv = make_attention(make_args("relpos", relpos_k=2))
    assert path_name(kv, on_cuda=True) == "flex piece"
    assert path_name(kv, on_cuda=True, backward=True) == "explicit"
    alibi = make_attention(make_args("alibi"))
    assert path_name(alibi, on_cuda=True) == "flex piece"
    assert path_name(alibi, on_cuda=True, backward=True) == "fused"
    csan = make_attention(make_args("csan1d", csan_layers="0"))
    assert path_name(csan, tgt_len=1024, src_len=1024, on_cuda=True) == "flex band"
    assert path_name(csan, tgt_len=1024, src_len=1024, on_cuda=True, backward=True) == "block-local"
    forced = make_attention(make_args("relpos", relpos_k=2), backend="flex")
    assert path_name(forced, on_cuda=True, backward=True) == "flex piece"
    reasons = backends.reasons(kv._layer, backends.Call(on_cuda=True, backward=True))
    assert reasons["flex piece"] == ["a training call (this order takes it for inference only)"]
