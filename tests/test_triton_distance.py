"""The Triton kernels of the distance terms (fairseq_attn_core/backends/distance/triton_*.py)
and of RoPE's rotation (fairseq_attn_core/rope_fused.py)
under Triton's CPU interpreter (a child process: triton_interpreter.py), against the float64
references of distance_refs.py: output and the gradients of q, k, v and the table (T5's
bias table, Shaw's key and value tables), in float64, tolerance 1e-9 (the cases: triton_cases.py). fp16 / bf16 run on a GPU only (the
interpreter's bf16 tl.dot is wrong): benchmarks/gpu_checks.sh.
"""

import pytest
import torch
from torch.testing import assert_close

import triton_cases
from distance_refs import alibi64, shaw64, t5bias64
from fairseq_attn_core.pieces.alibi import alibi_slopes
from fairseq_attn_core.pieces.rope import rotate
from fairseq_attn_core.backends.distance import DistanceForm, DistanceTerms
from fairseq_attn_core.backends.distance.triton_configs import configs_for
from fairseq_attn_core.backends.distance.triton_launch import triton_attention
from triton_interpreter import have_triton, run_interpreted

TOL = dict(rtol=1e-9, atol=1e-9)
# one worker runs the cases of one child process
pytestmark = pytest.mark.xdist_group("triton_interpreter")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    if not have_triton():
        pytest.skip("triton is not installed (scripts/setup_env.sh installs it)")
    return run_interpreted(tmp_path_factory.mktemp("triton") / "cases.pt")


def test_the_forms_the_triton_kernels_run_and_what_they_refuse():
    """A bias of the distance or Shaw's tables, not both; no terms, or a head wider than the configs,
    are refused in one line before triton is imported."""
    assert DistanceForm(bias="buckets").triton and DistanceForm(bias="slopes").triton
    assert DistanceForm(clip=2, keys=True).triton and DistanceForm(clip=2, keys=True, values=True).triton
    assert not DistanceForm().triton
    for bias in ("buckets", "slopes"):  # both: the kernels' backward_q would count far tiles twice
        assert not DistanceForm(clip=2, keys=True, bias=bias).triton
    q = torch.zeros(1, 1, 3, 8)
    with pytest.raises(ValueError, match="run a bias of the distance or Shaw's tables"):
        triton_attention(DistanceTerms(), q, q, q, 1.0)
    both = DistanceTerms(key_table=torch.zeros(5, 8), clip=2, slopes=(0.5,))
    with pytest.raises(ValueError, match="run a bias of the distance or Shaw's tables"):
        triton_attention(both, q, q, q, 1.0)
    assert configs_for(64).forward.block_m >= 16 and configs_for(48) == configs_for(64)
    with pytest.raises(ValueError, match="heads of at most 128 dimensions"):
        configs_for(200)


def reference(case, x):
    method, T, causal, _, H = case
    leaves = [x[n].clone().requires_grad_(True) for n in ("q", "k", "v")]
    if method == "t5bias":
        leaves.append(x["table"].clone().requires_grad_(True))
        out = t5bias64(*leaves, triton_cases.BUCKETS, triton_cases.MAX_DISTANCE, x["scale"], x["kpm"],
                       causal=causal)[0]
    elif method.startswith("relpos"):
        tables = [x[n].clone().requires_grad_(True) for n in ("table", "table_v") if x[n] is not None]
        leaves += tables
        out = shaw64(*leaves[:4], tables[1] if len(tables) > 1 else None, triton_cases.CLIP[T], x["scale"],
                     x["kpm"], causal=causal)[0]
    else:
        out = alibi64(*leaves, alibi_slopes(H), x["scale"], x["kpm"], causal=causal)[0]
    return out.detach(), torch.autograd.grad(out, leaves, x["dout"])


def ids(kind):
    return ["-".join(map(str, c)) for c in triton_cases.CASES[kind]]


@pytest.mark.parametrize("index", range(len(triton_cases.CASES["bias"])), ids=ids("bias"))
def test_bias_kernel_matches_float64_reference(results, index):
    check(triton_cases.CASES["bias"][index], index, results["bias"][index])


@pytest.mark.parametrize("index", range(len(triton_cases.CASES["keys"])), ids=ids("keys"))
def test_shaw_key_term_matches_float64_reference(results, index):
    check(triton_cases.CASES["keys"][index], index, results["keys"][index])


@pytest.mark.parametrize("index", range(len(triton_cases.CASES["values"])), ids=ids("values"))
def test_shaw_value_term_matches_float64_reference(results, index):
    check(triton_cases.CASES["values"][index], index, results["values"][index])


def check(case, index, got):
    x = triton_cases.inputs(case, seed=index)
    expected_out, expected = reference(case, x)
    assert_close(got["out"], expected_out, **TOL)
    if case[3] == "empty":  # the sentence without keys: zeros, not NaN
        assert torch.equal(got["out"][1], torch.zeros_like(got["out"][1]))
    assert len(got["grads"]) == len(expected)
    for name, a, e in zip(("q", "k", "v", "table", "value table"), got["grads"], expected):
        if case[1] > 1 or name == "v":  # one key: zero gradients but v's
            assert e.abs().max() > 0, name  # the comparison is not vacuous
        assert_close(a, e, **TOL, msg=lambda m: f"d{name}: {m}")


@pytest.mark.parametrize("index", range(len(triton_cases.CASES["rope"])), ids=ids("rope"))
def test_fused_rope_rotation_equals_the_piece_s_rotation(results, index):
    """The kernel (fairseq_attn_core/rope_fused.py) computes rope's ``rotate`` (the same products
    and sum; tests/test_piece_rope.py holds ``rotate`` to the paper), forward and backward; a
    part of the head unrotated, and positions that start past 0 (decoder queries)."""
    x = triton_cases.rope_inputs(triton_cases.CASES["rope"][index], seed=index)
    leaf = x["x"].clone().requires_grad_(True)
    expected = rotate(leaf, x["pos"], x["rot"], 10000.0)
    got = results["rope"][index]
    assert_close(got["out"], expected.detach(), rtol=1e-12, atol=1e-12)
    assert_close(got["grads"][0], torch.autograd.grad(expected, [leaf], x["dy"])[0], rtol=1e-12, atol=1e-12)
