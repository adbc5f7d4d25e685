"""Rows emptied by a mask contribute nothing anywhere.

For every registered piece and every allowed pair (the registry loop of
``reliability_helpers.compatible_sets``), a test-only piece empties chosen
query rows of chosen heads, and the core's output is compared with a plainly
written float64 reference of the combination: the pieces' own hooks supply
their terms (each piece is checked against its own reference elsewhere), the
combination is written out here with loops, and an emptied row has zero
probabilities before and after every ``post_softmax``, feeds nothing into
``value_term`` / ``combine``, and outputs zero *for its head* (other heads of
the same position are untouched, also after ``chained``'s W_attn mixes them).
"""

import copy
import math

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, output64, padded_batch, projections64, path_name, seed_cpu
from fairseq_attn_core import AttentionContext, AttentionPiece
from reliability_helpers import compatible_sets, piece_test_flags

SETS = compatible_sets(2)
#: head -> query indices whose keys are all masked by the test piece
EMPTIED = {0: (1,), 1: (2, 3), 3: (0, 5)}


class RowEmptier(AttentionPiece):
    """Test-only piece (not registered): masks every key of the rows in EMPTIED."""

    name = "_row_emptier"

    def allowed_mask(self, ctx):
        H = self.site.num_heads
        keep = torch.ones(1, H, ctx.tgt_len, ctx.src_len, dtype=torch.bool)
        for h, rows in EMPTIED.items():
            for i in rows:
                hit = (ctx.q_pos == i).nonzero().flatten()
                keep[0, h, hit] = False
        return keep


def build(names, side, backend):
    flags = {}
    for n in names:
        flags.update(piece_test_flags(n))
    attn = make_attention(make_args(",".join(names), **flags), side=side, backend=backend)
    if not attn.pieces:
        return None
    attn.pieces.append(RowEmptier(attn.site))
    return attn.train()  # DropAttention samples only in training (reseeded per call below)


def reference64(attn, x, kpm, causal, seed):
    """The combination written out in float64 (see module docstring)."""
    ref = copy.deepcopy(attn).double()
    T, B, _ = x.shape
    H, D = ref.num_heads, ref.head_dim
    seed_cpu(seed)
    q, k, v = projections64(ref, x)  # (B, H, T, D)
    ctx = AttentionContext(site=ref.site, bsz=B, tgt_len=T, src_len=T, q_pos=torch.arange(T),
                           k_pos=torch.arange(T), key_padding_mask=kpm, training=ref.training,
                           incremental=False)
    for p in ref.pieces:
        q, k, v = p.transform_qkv(q, k, v, ctx)
    bias = torch.zeros(B, H, T, T, dtype=torch.float64)
    for p in ref.pieces:
        b = p.score_bias(q, k, ctx)
        if b is not None:
            bias = bias + b
    pad = kpm.tolist()
    allowed = [[[[not pad[b][j] and not (causal and j > i) for j in range(T)]
                 for i in range(T)] for _ in range(H)] for b in range(B)]
    for p in ref.pieces:
        m = p.allowed_mask(ctx)
        if m is None:
            continue
        m = m.expand(B, H, T, T).tolist()
        allowed = [[[[allowed[b][h][i][j] and m[b][h][i][j] for j in range(T)] for i in range(T)]
                    for h in range(H)] for b in range(B)]
    factor, slot_ok = 1, None
    for p in ref.pieces:
        if p.expands_kv:
            k, v, factor, slot_ok = p.expand_kv(k, v, ctx)
            ctx.kv_factor = factor
    S = factor * T
    slot_ok = None if slot_ok is None else slot_ok.expand(B, H, T, S).tolist()
    # the loops run on Python floats (float64), not on tensor elements: the same sums in the same
    # order, without a tensor operation per element (~15 ms per reference, ~500 references)
    qs, ks, bs = (q * ref.scaling).tolist(), k.tolist(), bias.tolist()
    rows = [[[[0.0] * S for _ in range(T)] for _ in range(H)] for _ in range(B)]
    emptied = [[[[False] for _ in range(T)] for _ in range(H)] for _ in range(B)]
    for b in range(B):
        for h in range(H):
            for i in range(T):
                logits = {}
                for j in range(S):
                    if not allowed[b][h][i][j % T] or (slot_ok is not None and not slot_ok[b][h][i][j]):
                        continue
                    logits[j] = sum(qs[b][h][i][d] * ks[b][h][j][d] for d in range(D)) + bs[b][h][i][j % T]
                if not logits:
                    emptied[b][h][i][0] = True  # emptied: zero probabilities
                    continue
                top = max(logits.values())
                z = sum(math.exp(s - top) for s in logits.values())
                for j, s in logits.items():
                    rows[b][h][i][j] = math.exp(s - top) / z
    probs = torch.tensor(rows, dtype=torch.float64)
    empty = torch.tensor(emptied, dtype=torch.bool)
    for p in ref.pieces:
        probs = p.post_softmax(probs, ctx).masked_fill(empty, 0.0)
    ps, vs = probs.tolist(), v.tolist()
    sums = [[[[0.0] * D for _ in range(T)] for _ in range(H)] for _ in range(B)]
    for b in range(B):
        for h in range(H):
            for i in range(T):
                for j in range(S):
                    for d in range(D):
                        sums[b][h][i][d] += ps[b][h][i][j] * vs[b][h][j][d]
    out = torch.tensor(sums, dtype=torch.float64)
    for p in ref.pieces:
        extra = p.value_term(probs, ctx)
        if extra is not None:
            out = out + extra
    out = out.masked_fill(empty, 0.0)  # zero per head, before any piece mixes heads
    for p in ref.pieces:
        out = p.combine(probs, v, out, ctx)
    y = output64(ref, out)  # (T, B, C)
    for p in ref.pieces:
        extra = p.output_term(out, ctx)  # computed from the heads' output, after out_proj
        if extra is not None:
            y = y + extra
    return y, probs, empty


def cases(names):
    for side in ("encoder", "decoder"):
        for left_pad in ((True, False) if side == "encoder" else (False,)):
            yield side, left_pad


@pytest.mark.parametrize("names", SETS, ids=["+".join(s) for s in SETS])
def test_emptied_rows_contribute_nothing(names):
    checked = 0
    for side, left_pad in cases(names):
        attn = build(names, side, "auto")  # both paths run the same module: one float64 reference serves both
        if attn is None:
            continue
        x, kpm = padded_batch([6, 4], left_pad=left_pad)
        causal = side == "decoder"
        mask = torch.triu(torch.full((6, 6), float("-inf")), 1) if causal else None
        ref = None
        for backend in ("explicit", "fused") if attn.fused_ok else ("explicit",):
            attn.backend = backend
            seed_cpu(5)
            out, _ = attn(x, x, x, key_padding_mask=kpm, attn_mask=mask, need_weights=False)
            if ref is None:
                ref, probs, empty = reference64(attn, x, kpm, causal, seed=5)
                assert empty.any(), "the test mask must empty rows"
            assert_close(out.double(), ref, rtol=1e-5, atol=2e-5,
                         msg=lambda m: f"{names} {side} {backend} left_pad={left_pad}: {m}")
            if backend == "explicit":
                seed_cpu(5)
                _, w = attn(x, x, x, key_padding_mask=kpm, attn_mask=mask, need_head_weights=True)
                w = w.transpose(0, 1)  # (B, H, T, S)
                assert float(w.masked_select(empty).abs().max()) == 0.0
            checked += 1
    assert checked, f"{names}: no site/backend exercised"


def test_chained_with_disan_matches_reference_without_test_mask():
    """The issue's measured case, with DiSAN's own empty rows (diagonal disabled)."""
    flags = {**piece_test_flags("chained"), **piece_test_flags("disan")}
    attn = make_attention(make_args("chained,disan", **flags), backend="explicit").eval()
    x, kpm = padded_batch([6, 4], left_pad=True)
    out, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    ref, _, empty = reference64(attn, x, kpm, False, seed=0)
    assert empty.any()
    assert_close(out.double(), ref, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("left_pad", [True, False])
@pytest.mark.parametrize("piece", ["csan1d", "csan2d"])
def test_block_local_fused_path_agrees_on_emptied_rows(left_pad, piece):
    """csan1d and csan2d (its widened keys) from the policy's local_min_len take the block-local
    path (fairseq_attn_core/backends/local.py); emptied rows give the explicit result and the float64
    reference's (the threshold and the block lowered: 3 blocks of 8, the last cut short)."""
    from fairseq_attn_core import backends

    policy = backends.Policy(local_min_len=16, local_block=8)
    T = policy.local_min_len + 5
    args = make_args(piece, csan_layers="0", csan_window=3)
    fused = make_attention(args, backend="fused", policy=policy).eval()
    fused.pieces.append(RowEmptier(fused.site))
    explicit = copy.deepcopy(fused)
    explicit.backend = "explicit"
    assert path_name(fused, tgt_len=T, src_len=T) == "block-local"
    x, kpm = padded_batch([T, T - 9], left_pad=left_pad)
    res = []
    for attn in (fused, explicit):
        xi = x.clone().requires_grad_(True)
        out, _ = attn(xi, xi, xi, key_padding_mask=kpm, need_weights=False)
        out.pow(2).sum().backward()
        res.append((out, xi.grad))
    assert fused.last_run == ("block-local", 3)  # the blocks the policy asked for, not one of 128
    assert torch.isfinite(res[0][0]).all()
    assert_close(res[0][0], res[1][0], rtol=1e-5, atol=1e-6)
    assert_close(res[0][1], res[1][1], rtol=1e-5, atol=1e-6)
    ref, _, empty = reference64(fused, x, kpm, False, seed=0)
    assert empty.any()
    assert_close(res[0][0].detach().double(), ref, rtol=1e-5, atol=2e-5)
