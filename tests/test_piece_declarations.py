"""Tests generated from what the pieces declare: a loop over the registry (``PIECES``), each
piece's ``settings`` and the CSAN paper's Table 1 (``TABLE1`` below).

* every declared setting of every piece refuses its bad values (below ``lo``, above ``hi``,
  an even value for ``odd``, not > 0 for ``positive``, a word for a number, a non-choice,
  a layer past the model, a side that is none) in one line naming the flag and the value,
  and takes the values at its bounds;
* the default layer list and sides of every piece are the layers that hold it;
* parameter deltas at Transformer-base size of every row of ``TABLE1``;
* every piece that declares distance terms (``distance_terms``): each CPU path its form opens
  (region split, query blocks, distance bias: the kernels of backends/distance/) equals the
  explicit path forward and backward, in the number of query blocks the policy asks for, and
  each path it does not open is refused naming the property; the flex path (forward) too.

Looped over the registry elsewhere: incremental decoding refused by the core
(``test_backend_chooser.py``); train and generate of every architecture and the resume of
every piece with weights (``test_e2e_cli.py``). Each piece's float64 reference stays in its
own file.
"""

import functools
import math

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import make_args, make_attention, padded_batch
from fairseq_attn_core import PIECES, AttentionPiece, AttentionSite, PieceConfigError, backends, build_pieces
from fairseq_attn_core.settings import LAYERS, SIDES_ROLE, parse_layer_spec
from locality_helpers import build

NAMES = sorted(PIECES)
NUM_LAYERS, HEADS = 2, 4  # the toy model of make_args; a bound named by an attribute reads HEADS
WORD = "ten"

# rules between flags (a piece's check_combination), which no single declaration states
RULES = [
    ("dpi", {"dpi_max_len": 100, "max_source_positions": 1024}, "--dpi-max-len"),
    ("dpi", {"dpi_max_len": 100}, "--max-source-positions 1024"),  # unset: fairseq's default
    ("dpi", {"dpi_max_len": 100, "max_source_positions": 100, "dpi_sides": "both"},
     "--max-target-positions"),
    ("t5bias", {"t5_buckets": 7}, "--t5-buckets"),
    ("t5bias", {"t5_buckets": 8, "t5_max_distance": 4}, "--t5-max-distance"),
]


TIED = {setting for _, flags, _ in RULES for setting in flags}


def _bound(setting):
    return HEADS if isinstance(setting.hi, str) else setting.hi


def bad_values(setting):
    """(what, value, what the refusal shows: None for the value itself) that the declaration
    of ``setting`` refuses."""
    return [(*case, None)[:3] for case in _bad_values(setting)]


def _bad_values(setting):
    if setting.role == LAYERS:
        # a layer past the model is refused naming the index, not the whole list
        return [("past-last-layer", str(NUM_LAYERS), f"[{NUM_LAYERS}]"),
                ("range-past-last", f"0-{NUM_LAYERS}", f"[{NUM_LAYERS}]"), ("word", "first")]
    if setting.role == SIDES_ROLE:
        return [("not-a-side", "all")]
    if setting.choices is not None:
        return [("not-a-choice", "none-of-" + "|".join(setting.choices))]
    hi = _bound(setting)
    if setting.type is int:
        out = [("below-lo", setting.lo - 1), ("word", WORD)]
        if hi is not None:
            out.append(("above-hi", hi + (2 if setting.odd and hi % 2 else 1)))
        if setting.odd:
            out.append(("even", setting.lo + 1 if setting.lo % 2 else setting.lo))
        return out
    if setting.type is float:
        out = [("word", WORD)]
        if setting.positive:
            out += [("zero", 0.0), ("negative", -1.0), ("infinite", math.inf)]
        if setting.lo is not None:
            out.append(("below-lo", setting.lo - 0.5))
        if hi is not None:
            out.append(("above-hi", hi if setting.hi_open else hi + 0.5))
        return out
    return []  # free text: the piece parses it (its own file tests the refusals)


def good_values(setting):
    """Values at the bounds of ``setting`` that its declaration accepts: not for a setting
    that a rule ties to other flags, nor for sides (the position methods and disan tie
    them to other flags)."""
    if setting.rule or setting.role == SIDES_ROLE or setting.name in TIED:
        return []
    if setting.role == LAYERS:
        return ["all", str(NUM_LAYERS - 1), f"0-{NUM_LAYERS - 1}"]
    if setting.choices is not None:
        return list(setting.choices)
    if setting.type is int:
        lo = setting.lo + 1 if setting.odd and setting.lo % 2 == 0 else setting.lo
        hi = _bound(setting)
        top = [] if hi is None else [hi - 1 if setting.odd and hi % 2 == 0 else hi]
        return [lo, *top]
    if setting.type is float:
        out = [1e-3] if setting.positive else []
        if setting.lo is not None:
            out.append(setting.lo)
        if _bound(setting) is not None and not setting.hi_open:
            out.append(_bound(setting))
        return out
    return []


def cases(values_of):
    return [pytest.param(name, s, *case[1:], id=f"{name}-{s.name}-{case[0]}")
            for name in NAMES for s in PIECES[name].settings
            for case in values_of(s)]


def with_test_flags(name, **flags):
    return make_args(name, layers=NUM_LAYERS, heads=HEADS, **{**PIECES[name].test_flags, **flags})


@pytest.mark.parametrize("name, setting, bad, shown", cases(bad_values))
def test_a_bad_value_of_a_declared_setting_is_refused_naming_the_flag(name, setting, bad, shown):
    with_test_flags(name)  # the piece's test flags alone are valid: the refusal is the value's
    with pytest.raises(PieceConfigError) as info:
        with_test_flags(name, **{setting.name: bad})
    msg = str(info.value)
    assert setting.flag in msg and "\n" not in msg, msg
    shown = [shown] if shown else [repr(bad), str(bad)]
    assert any(v in msg for v in shown), f"the refusal does not show the value: {msg}"


@pytest.mark.parametrize("name, setting, good",
                         cases(lambda s: [(str(v), v) for v in good_values(s)]))
def test_a_value_at_the_bounds_of_a_declared_setting_is_taken(name, setting, good):
    args = with_test_flags(name, **{setting.name: good})
    assert getattr(args, setting.name) == good


@pytest.mark.parametrize("name, flags, flag", RULES, ids=[f"{r[0]}-{'-'.join(r[1])}" for r in RULES])
def test_a_rule_between_flags_is_refused_naming_the_flag(name, flags, flag):
    with pytest.raises(PieceConfigError) as info:
        make_args(name, **flags)
    assert flag in str(info.value) and "\n" not in str(info.value), str(info.value)


# ---- the layers a piece covers ------------------------------------------------------
# Yang et al. 2019 (CSAN), Table 1: the locality baselines sit on the lower three encoder
# layers; block self-attention on every layer.
BASELINE_LAYERS = {"localsoft": "0-2", "localhard": "0-2", "neighbor": "0-2", "cnns": "0-2", "block": "all"}


@pytest.mark.parametrize("name", NAMES)
def test_default_layers_and_sides_are_the_layers_that_hold_the_piece(name):
    layers = 6
    args = make_args(name, layers=layers)
    default = PIECES[name].layers_setting().default
    sides = PIECES[name].covered_sides(args)
    expected = {(side, i) for side in sides for i in parse_layer_spec(default, layers, "")}
    # built in order and kept alive: a stack of t5bias layers shares the first one's table
    built = {(side, i): build_pieces(args, AttentionSite(side, i, layers, HEADS, 16 // HEADS))
             for side in ("encoder", "decoder") for i in range(layers)}
    held = {site for site, pieces in built.items() if name in [p.name for p in pieces]}
    assert held == expected and held, name
    if name in BASELINE_LAYERS:
        assert default == BASELINE_LAYERS[name] and sides == ("encoder",), (name, default, sides)


# ---- parameter deltas at Transformer-base size (Table 1) ------------------------------
C, H, D, L3, L6 = 512, 8, 64, 3, 6


def predictor(n_out, hidden):
    return C * hidden + hidden + hidden * n_out + n_out


# variant (transformer_<variant>_wmt_en_de), flags, formula of the delta, the paper's +xM
# (Table 1), whether ours rounds to it
TABLE1 = [
    ("bidirect", {}, 0, 0.0, True),
    # a^K and a^V (k = 16) in every encoder and decoder self-attention; the authors' code
    # has 74,496 with tables in the 6 encoder-decoder attentions too
    ("relpos", {}, 2 * L6 * 2 * (2 * 16 + 1) * D, 0.1, True),
    ("localsoft", {}, L3 * predictor(2 * H, C), 0.8, True),
    ("localhard", {}, L3 * predictor(4, 4 * D), 0.4, True),
    ("neighbor", {}, L3 * H, 0.4, False),
    ("neighbor", {"neighbor_mode": "predicted"}, L3 * predictor(4, 4 * D), 0.4, True),
    ("block", {}, L6 * (5 * C * C + 3 * C + C * H + H), 6.0, False),
    ("block", {"block_layers": "0-2"}, L3 * (5 * C * C + 3 * C + C * H + H), 6.0, False),
    ("cnns", {}, L3 * 4 * (7 * C + C * C + C + 2 * C), 42.6, False),
    ("cnns", {"cnns_conv": "full", "cnns_kernel": 3, "cnns_convs": 18},
     L3 * 18 * (3 * C * C + C + 2 * C), 42.6, True),
]


def base_size_params(arch, **flags):
    """The model's parameter count. Built on the meta device: the same modules and parameter
    shapes, without allocating or initialising their values (~0.06 s a build instead of ~0.5)."""
    with torch.device("meta"):
        model, _ = build(arch, dict(arch=arch, **flags))
    assert all(p.is_meta for p in model.parameters())
    return sum(p.numel() for p in model.parameters())


@functools.lru_cache(maxsize=1)
def baseline_params():
    return base_size_params("transformer_attn_wmt_en_de")


@pytest.mark.parametrize("name, flags, formula, paper, matches", TABLE1,
                         ids=[r[0] + "".join(f"-{k}={v}" for k, v in r[1].items()) for r in TABLE1])
def test_parameter_delta_at_base_size_matches_the_formula(name, flags, formula, paper, matches):
    """Delta over the baseline == the formula, and whether it rounds to the paper's +xM
    (run with ``-s`` to print it)."""
    delta = base_size_params(f"transformer_{name}_wmt_en_de", **flags) - baseline_params()
    print(f"\n{name} {flags}: {delta:,} parameters, ours {delta / 1e6:+.1f}M, paper {paper:+.1f}M")
    assert delta == formula
    assert (round(delta / 1e6, 1) == paper) == matches, delta


# ---------------------------------------------------------------------------
# distance terms: generated from each declaration
# ---------------------------------------------------------------------------
DISTANCE = [n for n in NAMES if PIECES[n].distance_terms is not AttentionPiece.distance_terms]
#: the property of a form -> the CPU path it opens and the self-attention that reaches it
FORM_PATHS = {"far_split": ("region split", "encoder"), "query_blocks": ("query blocks", "decoder"),
              "bias_kernel": ("distance bias", "encoder")}
#: thresholds and blocks lowered: 9 positions in 3 query blocks on every such path
LOW = backends.Policy(blocked_min_len=4, distance_bias_min_len=4, region_block=4, query_block=4,
                      distance_block=4)
T_LOW = 9


def distance_layer(name, side, backend):
    attn = make_attention(make_args(name, **PIECES[name].test_flags), side=side, backend=backend,
                          dtype=torch.float64, policy=LOW)
    with torch.no_grad():  # the same non-zero tables in every twin
        g = torch.Generator().manual_seed(4)
        for n, p in attn.pieces.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return attn


def run_distance_layer(attn, side, grad=True):
    """Output and the input's and parameters' gradients of a padded batch (the decoder's
    future mask, right padding)."""
    x, kpm = padded_batch([T_LOW, 6, 8], left_pad=side == "encoder", dtype=torch.float64)
    mask = torch.triu(torch.full((T_LOW, T_LOW), float("-inf"), dtype=torch.float64), 1) \
        if side == "decoder" else None
    x.requires_grad_(grad)
    y, _ = attn(x, x, x, key_padding_mask=kpm, attn_mask=mask, need_weights=False)
    if not grad:
        return y.detach(), None, {}
    y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=y.dtype))
    return y.detach(), x.grad, {n: p.grad for n, p in attn.named_parameters() if p.grad is not None}


def test_the_position_methods_declare_distance_terms():
    assert DISTANCE == ["alibi", "relpos", "t5bias"]


@pytest.mark.parametrize("name", DISTANCE)
@pytest.mark.parametrize("prop", list(FORM_PATHS))
def test_each_path_a_distance_declaration_opens_equals_the_explicit_path(name, prop):
    path, side = FORM_PATHS[prop]
    auto = distance_layer(name, side, "auto")
    form = auto.pieces[0].distance_terms().form
    call = backends.Call(tgt_len=T_LOW, src_len=T_LOW, attn_mask=side == "decoder", backward=True)
    if not getattr(form, prop):
        assert prop in " ".join(backends.reasons(auto._layer, call)[path])
        assert auto.path_for(call).name != path
        return
    assert auto.path_for(call).name == path
    got = run_distance_layer(auto, side)
    assert auto.last_run == (path, 3)
    want = run_distance_layer(distance_layer(name, side, "explicit"), side)
    tol = dict(rtol=1e-5, atol=1e-5)  # the explicit path's softmax is float32
    assert_close(got[0], want[0], **tol)
    assert_close(got[1], want[1], **tol)
    assert set(got[2]) == set(want[2])
    for n in want[2]:
        assert_close(got[2][n], want[2][n], **tol, msg=lambda m: f"{n}: {m}")


@pytest.mark.parametrize("name", DISTANCE)
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_the_flex_form_of_a_distance_declaration_equals_the_explicit_path(name, side):
    """Inference on CPU (flex_attention has no CPU backward): the same output."""
    flex = distance_layer(name, side, "auto")
    if not flex.pieces[0].distance_terms().form.flex:
        assert flex.path_for(backends.Call(on_cuda=True)).name != "flex piece"
        return
    flex.backend = "flex"
    flex.eval()
    with torch.no_grad():
        got = run_distance_layer(flex, side, grad=False)[0]
    assert flex.last_run == ("flex piece", None)
    want = run_distance_layer(distance_layer(name, side, "explicit").eval(), side, grad=False)[0]
    assert_close(got, want, rtol=1e-5, atol=1e-5)
