"""The chooser between attention paths (fairseq_attn_core/backends/) and the piece contract it reads.

A loop over the registry: every piece's declared capabilities decide the path, a forced
``--attn-backend`` that cannot run a piece is refused in one line naming the flag with each
reason once, incremental decoding of a piece that declares it unsupported is refused once
by the core.
"""


import importlib.util

import pytest

from attn_helpers import make_args, make_attention, padded_batch, path_name
from fairseq_attn_core import PIECES, AttentionPiece, PieceConfigError, backends

NAMES = sorted(PIECES)


def piece_args(name, **extra):
    return make_args(name, **{**PIECES[name].test_flags, **extra})


def active_side(name):
    return "decoder" if PIECES[name].sides == ("decoder",) else "encoder"


def test_the_core_reads_only_declared_capabilities():
    """Every capability the core or the chooser reads is declared on the base class."""
    for attr in ("fused_ok", "fused_with", "incremental_ok", "expands_kv", "band_half",
                 "distance_terms", "runs_fused"):
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
    terms = attn.pieces[0].distance_terms() if len(attn.pieces) == 1 else None
    flex_alone = terms is not None and terms.form.flex
    band = any(p.band_half is not None for p in attn.pieces)
    # auto on CPU, short training call: SDPA unless the piece needs the probabilities
    assert path_name(attn) == ("fused" if fused else "explicit")
    # auto on CUDA: distance terms flex runs (a value table, slopes) take it; a long band goes to flex
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


# the distance kernels' paths, each with the self-attention that reaches it
DISTANCE_PATHS = [("relpos", dict(relpos_k=2), "encoder", "region split"),
                  ("relpos", dict(relpos_k=2), "decoder", "query blocks"),
                  ("t5bias", {}, "encoder", "distance bias"),
                  ("alibi", {}, "encoder", "distance bias")]


@pytest.mark.parametrize("name,flags,side,path", DISTANCE_PATHS)
def test_auto_on_cuda_trains_through_the_distance_kernels_where_the_policy_lists_cuda(name, flags, side, path):
    """A training call on CUDA (Call.backward; the flex paths are for inference there) takes the
    distance kernels' path once the policy lists CUDA among their devices, and the SDPA or
    explicit path under the default policy below its CUDA length (see the tests below)."""
    n = backends.DEFAULT.blocked_min_len
    call = dict(tgt_len=n, src_len=n, on_cuda=True, backward=True, attn_mask=side == "decoder")
    cuda = backends.Policy(distance_devices=("cpu", "cuda"))
    attn = make_attention(make_args(name, **flags), side=side, policy=cuda)
    assert path_name(attn, **call) == path
    assert path_name(attn, **{**call, "on_cuda": False}) == path  # CPU as before
    default = make_attention(make_args(name, **flags), side=side)
    assert path_name(default, **call) in ("fused", "explicit")
    assert "on cuda" in " ".join(backends.reasons(default._layer, backends.Call(**call))[path])


# auto's default on a CUDA training call from its CUDA length: the distance kernels where an
# H200 measured them faster (relpos with a value table, t5bias's learned table; encoder), the
# SDPA paths where they were slower (alibi, relpos k), the explicit path where they are
# unmeasured (the query blocks: the decoder's relpos kv)
CUDA_TRAINING = [("relpos", dict(relpos_k=2), "encoder", "region split"),
                 ("relpos", dict(relpos_k=2, relpos_mode="tied"), "encoder", "region split"),
                 ("t5bias", {}, "encoder", "distance bias"),
                 ("alibi", {}, "encoder", "fused"),
                 ("relpos", dict(relpos_k=2, relpos_mode="k"), "encoder", "fused"),
                 ("relpos", dict(relpos_k=2), "decoder", "explicit")]


def cuda_training_call(side, n, **extra):
    return {**dict(tgt_len=n, src_len=n, on_cuda=True, backward=True, attn_mask=side == "decoder"), **extra}


@pytest.mark.parametrize("name,flags,side,path", CUDA_TRAINING)
def test_auto_on_cuda_trains_through_the_distance_kernels_where_they_were_measured_faster(name, flags, side, path):
    n = backends.DEFAULT.cuda_training_min_len
    attn = make_attention(make_args(name, **flags), side=side)
    for length in (n, 2 * n):
        assert path_name(attn, **cuda_training_call(side, length)) == path
    # the same layer under a policy without the CUDA forms: what auto took before the measurement
    before = make_attention(make_args(name, **flags), side=side,
                            policy=backends.Policy(cuda_training_forms=()))
    assert path_name(before, **cuda_training_call(side, n)) in ("fused", "explicit")
    # shorter calls, inference calls and the CPU: as under that policy
    for call in (cuda_training_call(side, n - 1), cuda_training_call(side, n, backward=False),
                 cuda_training_call(side, n, on_cuda=False)):
        assert path_name(attn, **call) == path_name(before, **call), call


def test_the_cuda_reasons_name_the_form_the_call_and_the_length():
    alibi = make_attention(make_args("alibi"), side="encoder")
    why = backends.reasons(alibi._layer, backends.Call(**cuda_training_call("encoder", 512)))
    assert why["distance bias"] == ["on cuda, distance terms without values/learned_bias "
                                    "(taken there for those only)"]
    t5 = make_attention(make_args("t5bias"), side="encoder")
    why = backends.reasons(t5._layer, backends.Call(**cuda_training_call("encoder", 256, backward=False)))
    assert why["distance bias"] == ["on cuda, an inference call (taken there for training calls only)",
                                    "on cuda, shorter than 512 positions"]
    relpos = make_attention(make_args("relpos", relpos_k=2), side="decoder")
    why = backends.reasons(relpos._layer, backends.Call(**cuda_training_call("decoder", 512)))
    assert "on cuda (taken on cpu only)" in why["query blocks"]


def test_the_policy_decides_the_cuda_forms_and_length():
    relpos_k = make_args("relpos", relpos_k=2, relpos_mode="k")
    keys = make_attention(relpos_k, policy=backends.Policy(cuda_training_forms=("keys",)))
    assert path_name(keys, **cuda_training_call("encoder", 512)) == "region split"
    # the path's own threshold holds on CUDA too (the distance bias: distance_bias_min_len, 128)
    shorter = make_attention(make_args("t5bias"), policy=backends.Policy(cuda_training_min_len=64))
    assert path_name(shorter, **cuda_training_call("encoder", 128)) == "distance bias"
    assert path_name(shorter, **cuda_training_call("encoder", 127)) == "fused"


def test_a_policy_refuses_bad_values_naming_the_field():
    with pytest.raises(ValueError, match="Policy.local_block must be an integer >= 1"):
        backends.Policy(local_block=0)
    with pytest.raises(ValueError, match="Policy.distance_devices"):
        backends.Policy(distance_devices=("tpu",))
    with pytest.raises(ValueError, match="Policy.cuda_training_forms must be a tuple of"):
        backends.Policy(cuda_training_forms=("slopes",))
    with pytest.raises(ValueError, match="Policy.cuda_training_min_len must be an integer >= 1"):
        backends.Policy(cuda_training_min_len=0)


def test_the_forms_a_policy_may_name_are_properties_of_a_distance_form():
    t5 = backends.DistanceForm(bias="buckets")
    relpos_kv = backends.DistanceForm(clip=2, keys=True, values=True)
    assert [getattr(t5, f) for f in backends.policy.FORM_PROPERTIES] == [False, False, True]
    assert [getattr(relpos_kv, f) for f in backends.policy.FORM_PROPERTIES] == [True, True, False]


def test_auto_takes_the_triton_path_on_cuda_only_for_the_policy_s_triton_forms():
    """Unmeasured on a GPU, so not by default; a policy that lists a form takes it on CUDA
    (where triton is importable), never on the CPU."""
    call = cuda_training_call("encoder", 512)
    t5 = make_attention(make_args("t5bias"), side="encoder")
    assert path_name(t5, **call) == "distance bias"  # today's CUDA path, unchanged
    why = backends.reasons(t5._layer, backends.Call(**call))["triton distance"]
    assert "distance terms not among the policy's triton_forms (none: unmeasured on a GPU)" in why
    policy = backends.Policy(triton_forms=("learned_bias",))
    t5_triton = make_attention(make_args("t5bias"), side="encoder", policy=policy)
    if importlib.util.find_spec("triton") is not None:
        assert path_name(t5_triton, **call) == "triton distance"
        assert path_name(t5_triton, **{**call, "backward": False, "tgt_len": 5, "src_len": 5}) == "triton distance"
    else:
        assert "triton is not installed" in " ".join(backends.reasons(t5_triton._layer, backends.Call(**call))["triton distance"])
    cpu = backends.reasons(t5_triton._layer, backends.Call(**{**call, "on_cuda": False}))["triton distance"]
    assert "on cpu (taken on cuda only)" in cpu
    alibi = make_attention(make_args("alibi"), side="encoder", policy=policy)  # a bias, but not learned
    assert path_name(alibi, **call) == "fused"
    decoder = make_attention(make_args("t5bias"), side="decoder", policy=policy)  # attn_mask read as causal
    assert path_name(decoder, **cuda_training_call("decoder", 512)) == "triton distance"
    with pytest.raises(ValueError, match="Policy.triton_forms must be a tuple of"):
        backends.Policy(triton_forms=("values",))
