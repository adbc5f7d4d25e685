"""``--attn-backend triton``: refused at model build where the kernels cannot run, in one line
naming the flag; under Triton's interpreter (a child process, triton_model_cases.py) a
self-attention layer, an encoder's and a decoder's under fairseq's future mask, runs the Triton
path and equals the reference path: the fused one where it runs the piece (t5bias, float64:
1e-9), the explicit one otherwise (relpos kv: its softmax is float32, 1e-5)."""

import pytest
import torch
from torch.testing import assert_close

from attn_helpers import make_args, make_attention
from fairseq_attn_core import PieceConfigError, backends
from fairseq_attn_core.backends.distance import DistanceForm
from triton_interpreter import have_triton, run_interpreted

pytestmark = pytest.mark.xdist_group("triton_model_interpreter")
TOL = {"fused": dict(rtol=1e-9, atol=1e-9), "explicit": dict(rtol=1e-5, atol=1e-5)}
SUFFIX = "; --attn-backend auto or explicit runs every layer, on the explicit path where needed"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    if not have_triton():
        pytest.skip("triton is not installed (scripts/setup_env.sh installs it)")
    return run_interpreted(tmp_path_factory.mktemp("triton_model") / "cases.pt", "triton_model_cases.py")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a machine without CUDA")
def test_forced_triton_refused_without_cuda_in_one_line():
    with pytest.raises(PieceConfigError) as info:
        make_args("t5bias", attn_backend="triton", attention_dropout=0.1)  # at flag validation
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("--attn-backend triton: ") and msg.endswith(SUFFIX), msg
    assert "no CUDA device" in msg and "attention dropout 0.1" in msg, msg
    with pytest.raises(PieceConfigError) as at_build:  # a layer built directly: the same line
        make_attention(make_args("t5bias"), backend="triton", dropout=0.1)
    assert str(at_build.value) == msg
    with pytest.raises(PieceConfigError, match="^--attn-backend triton: the Triton kernels run on CUDA"):
        backends.check_training_device("triton", cpu=True)


def test_forced_triton_order():
    """The Triton path for every call it runs, encoder and the decoder's masked calls (fairseq's
    attn_mask); incremental decoding and requested weights go to the SDPA paths."""
    layer = backends.Layer("triton", pieces=("t5bias",), distance=DistanceForm(bias="buckets"))
    train = dict(on_cuda=True, tgt_len=9, src_len=9, backward=True)
    assert backends.choose(layer, backends.Call(**train)).name == "triton distance"
    assert backends.choose(layer, backends.Call(attn_mask=True, **train)).name == "triton distance"
    assert backends.choose(layer, backends.Call(on_cuda=True, incremental=True, src_len=9)).name == "fused"
    assert backends.choose(layer, backends.Call(need_weights=True, **train)).name == "explicit"
    relpos = backends.Layer("triton", pieces=("relpos",), needs_probs=("relpos",),
                            distance=DistanceForm(clip=3, keys=True, values=True))
    assert backends.choose(relpos, backends.Call(attn_mask=True, **train)).name == "triton distance"


@pytest.mark.parametrize("name", ["t5bias encoder", "t5bias decoder", "relpos_kv encoder", "relpos_kv decoder"])
def test_forced_triton_layer_equals_the_reference(results, name):
    (_, got), (ref_backend, ref) = results[name].items()
    assert (got["path"], ref["path"]) == ("triton distance", ref_backend)
    tol = TOL[ref_backend]
    assert_close(got["out"], ref["out"], **tol)
    assert_close(got["dx"], ref["dx"], **tol)
    assert set(got["grads"]) == set(ref["grads"]) and any(n.startswith("pieces.0.") for n in got["grads"])
    for n in got["grads"]:  # the piece's tables too
        assert_close(got["grads"][n], ref["grads"][n], **tol, msg=lambda m: f"{n}: {m}")


def test_forced_triton_refused_per_layer(results):
    """Where CUDA is no obstacle (the interpreter): a model whose pieces declare no distance
    terms, a layer whose pieces' terms the kernels do not run (two pieces), and heads above the
    kernels' largest config, refused at build in one line."""
    rope, head = results["refusals"]["rope"], results["refusals"]["head_dim"]
    assert results["refusals"]["two_pieces"] == (
        "--attn-backend triton: pieces ['t5bias', 'csan1d'] declare no distance terms the kernels run "
        "(one piece alone in its layer: t5bias, alibi or relpos)" + SUFFIX)
    assert rope == "--attn-backend triton: no piece of the model declares distance terms (t5bias, alibi, relpos)" + SUFFIX
    assert head.startswith("--attn-backend triton: ") and "(got 256)" in head and head.endswith(SUFFIX), head


def test_the_device_run_s_lengths_reuse_compiled_kernels(results):
    """benchmarks/triton_distance_bench.py under the interpreter (what gpu_checks.sh rehearses):
    the Triton path's kernel specializations (one compile each on a GPU) are counted per length;
    a length that is a multiple of 16 reuses the kernels of another (32 after 16, as 1024 after
    512; t5bias's too, though its window of per-distance sums is cut by the length there), one that
    is not compiles its own (t5bias shares alibi's delta kernel); --max-compiles fails the run beyond its count."""
    bench = results["bench"]
    new = [line.split(": ")[1].split(" s, ") for line in bench["out"].splitlines() if line.startswith("Warm-up")]
    assert [(m.split()[0], n) for m, n in new] == [("alibi", "4 new"), ("t5bias", "3 new"), ("alibi", "0 new"),
                                                   ("t5bias", "0 new"), ("alibi", "4 new"), ("t5bias", "3 new")], \
        bench["out"][-3000:]
    assert "Triton kernel specializations (compiles on a GPU): 14, at most 5 allowed" in bench["out"]
    assert bench["status"] == 1 and "more than --max-compiles 5" in bench["err"], bench["err"][-2000:]


def test_the_launcher_keeps_the_tables_of_a_shape_in_use_while_others_come_and_go():
    """The per-shape tables (bucket index, edge rows) are dropped least recently used first: a
    length met on every step keeps its tables however many other lengths pass, and the tables
    of the length not used since the start are made again."""
    import functools

    from fairseq_attn_core.backends.distance import triton_launch
    from fairseq_attn_core.backends.distance.terms import DistanceTerms
    from fairseq_attn_core.pieces.t5bias import relative_position_bucket

    bucket = functools.partial(relative_position_bucket, bidirectional=True, num_buckets=4, max_distance=8)
    terms = DistanceTerms(bias_table=torch.zeros(4, 2), bucket=bucket)

    def tables(length):
        return triton_launch._shape_tables(terms, 2, length, length, torch.device("cpu"), torch.float64)

    in_use, left = tables(1), tables(2)
    for length in range(3, 3 + triton_launch._MAX_TABLES):
        assert tables(1) is in_use
        tables(length)
    assert tables(1) is in_use
    assert tables(2) is not left
    expected = [[int(bucket(torch.tensor(j - i))) for j in range(2)] for i in range(2)]
    assert [[int(left["bucket"][1 + j - i]) for j in range(2)] for i in range(2)] == expected
