"""The chooser between attention paths (attention/backends/) and the piece contract it reads.

A loop over the registry: every piece's declared capabilities decide the path, a forced
``--attn-backend`` that cannot run a piece is refused in one line naming the flag with each
reason once, incremental decoding of a piece that declares it unsupported is refused once
by the core. ALiBi's flex path against a float64 reference at a head count that is not a
power of two.
"""

import math

import pytest
import torch
import torch.nn.attention.flex_attention as torch_flex
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, padded_batch, path_name
from fairseq_attn_plugins.attention import PIECES, AttentionPiece, PieceConfigError, backends

NAMES = sorted(PIECES)


def piece_args(name, **extra):
    return make_args(name, **{**PIECES[name].test_flags, **extra})


def active_side(name):
    return "decoder" if PIECES[name].sides == ("decoder",) else "encoder"


def test_the_core_reads_only_declared_capabilities():
    """Every capability the core or the chooser reads is declared on the base class."""
    for attr in ("fused_ok", "fused_with", "incremental_ok", "expands_kv", "band_half",
                 "flex_path_ok", "flex_forward", "runs_fused"):
        assert attr in vars(AttentionPiece) or attr in AttentionPiece.__annotations__, attr
    for name, cls in PIECES.items():
        for setting, values in cls.fused_with.items():
            assert any(s.name == setting for s in cls.all_settings()), (name, setting)
            assert values, (name, setting)


@pytest.mark.parametrize("name", NAMES)
def test_each_piece_takes_the_path_its_declarations_allow(name):
    args = piece_args(name)
    attn = make_attention(args, side=active_side(name))
    fused = PIECES[name].fused_ok_with(args)
    flex_alone = len(attn.pieces) == 1 and attn.pieces[0].flex_path_ok
    band = any(p.band_half is not None for p in attn.pieces)
    # auto on CPU, short training call: SDPA unless the piece needs the probabilities
    assert path_name(attn) == ("fused" if fused else "explicit")
    # auto on CUDA: a piece with its own flex path runs it; a long band goes to flex
    expected = "flex piece" if flex_alone else ("fused" if fused else "explicit")
    assert path_name(attn, on_cuda=True) == expected
    if band and fused and not flex_alone:
        assert path_name(attn, on_cuda=True, tgt_len=1024, src_len=1024) == "flex band"
    # weights requested: always the explicit path, whatever the backend
    assert path_name(attn, need_weights=True, on_cuda=True) == "explicit"
    # and every path but the chosen one says why it does not run
    layer, call = attn._layer, backends.Call(on_cuda=True)
    chosen = attn.path_for(call)
    for path in backends.PATHS[: backends.PATHS.index(chosen)]:
        assert path.not_supported_reasons(layer, call), path.name


@pytest.mark.parametrize("name", NAMES)
def test_forced_fused_refused_once_in_one_line(name):
    args = piece_args(name)
    if PIECES[name].fused_ok_with(args):
        attn = make_attention(args, side=active_side(name), backend="fused")
        assert path_name(attn) in ("fused", "block-local")
        return
    with pytest.raises(PieceConfigError) as info:
        piece_args(name, attn_backend="fused")  # at flag validation
    msg = str(info.value)
    assert msg.startswith("--attn-backend fused: ") and "\n" not in msg, msg
    assert msg.count(f"'{name}'") == 1, msg
    with pytest.raises(PieceConfigError) as at_build:  # a module built directly: the same line
        make_attention(args, side=active_side(name), backend="fused")
    assert str(at_build.value) == msg


def test_forced_flex_reasons_each_once():
    with pytest.raises(PieceConfigError) as info:
        make_args("alibi", alibi_layers="0", attn_backend="flex", attention_dropout=0.1)
    msg = str(info.value)
    assert msg.count("attention dropout") == 1 and msg.count("--attn-backend flex") == 1, msg
    assert "\n" not in msg
    with pytest.raises(PieceConfigError, match="must be one of"):
        make_args("", attn_backend="sdpa")


def test_build_log_says_why_a_layer_runs_explicit():
    chained = make_attention(piece_args("chained"))
    assert chained.why_explicit() == "pieces ['chained'] need the probability matrix"
    plain = make_attention(make_args(""))
    assert plain.why_explicit() is None
    plain.backend = "explicit"
    assert plain.why_explicit() == "--attn-backend explicit"


@pytest.mark.parametrize("name", [n for n in NAMES if not PIECES[n].incremental_ok])
def test_incremental_decoding_refused_once_by_the_core(name):
    attn = make_attention(piece_args(name), side=active_side(name)).eval()
    x, _ = padded_batch([3], left_pad=False)
    with pytest.raises(RuntimeError) as info:
        attn(x[:1], x[:1], x[:1], incremental_state={}, need_weights=False)
    msg = str(info.value)
    assert msg.count(name) == 1 and "incremental decoding is not supported" in msg, msg


# ---------------------------------------------------------------------------
# ALiBi on flex_attention: the model's dtype, a head count that is not a power of two
# ---------------------------------------------------------------------------
def alibi_reference64(q, k, v, slopes, kpm, scale, start=0):
    """softmax(scale q.k - m_h |i - j|) v with plain loops, float64."""
    B, H, T, D = q.shape
    S = k.size(2)
    out = torch.zeros(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = [j for j in range(S) if not kpm[b, j]]
                e = [scale * float(q[b, h, i] @ k[b, h, j]) - slopes[h] * abs(start + i - j)
                     for j in keys]
                top = max(e)
                w = [math.exp(x - top) for x in e]
                total = sum(w)
                for wj, j in zip(w, keys):
                    out[b, h, i] += wj / total * v[b, h, j]
    return out


def test_alibi_flex_float64_matches_plain_reference_at_twelve_heads():
    from fairseq_attn_plugins.attention.pieces.alibi import alibi_slopes

    heads = 12  # not a power of two: the paper's interleaved slopes, 2^-0.5 among them
    # (no float32 number equals them: a float32 slope shows at these tolerances)
    args = make_args("alibi", heads=heads)
    flex = make_attention(args, embed_dim=24, num_heads=heads, backend="flex",
                          dtype=torch.float64).eval()
    fused = make_attention(args, embed_dim=24, num_heads=heads, backend="fused",
                           dtype=torch.float64).eval()
    piece = flex.pieces[0]
    slopes = piece.slope_tensor(torch.zeros(1, dtype=torch.float64))
    assert slopes.dtype == torch.float64
    assert slopes.tolist() == alibi_slopes(heads)  # the float64 values themselves, not rounded
    x, kpm = padded_batch([5, 3], embed_dim=24, dtype=torch.float64)
    with torch.no_grad():
        out_flex = flex(x, x, x, key_padding_mask=kpm, need_weights=False)[0]
        out_fused = fused(x, x, x, key_padding_mask=kpm, need_weights=False)[0]
        from attn_helpers import output64, projections64

        q, k, v = projections64(flex, x)
        ref = output64(flex, alibi_reference64(q, k, v, alibi_slopes(heads), kpm, flex.scaling))
    assert path_name(flex) == "flex piece"
    real = ~kpm.t()[:, :, None]
    assert_close(out_flex * real, ref * real, rtol=1e-12, atol=1e-12)
    assert_close(out_fused * real, ref * real, rtol=1e-12, atol=1e-12)


def test_alibi_flex_slopes_follow_the_model_dtype():
    """fp16/bf16/fp32 models compute the penalty in float32, a float64 one in float64
    (the score bias of the other paths does the same)."""
    attn = make_attention(make_args("alibi"))
    piece = attn.pieces[0]
    for dtype, want in ((torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                        (torch.float32, torch.float32), (torch.float64, torch.float64)):
        assert piece.slope_tensor(torch.zeros(1, dtype=dtype)).dtype == want
    assert torch_flex.flex_attention is not None
