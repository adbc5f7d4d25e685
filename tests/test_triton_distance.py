"""The Triton kernels of the distance terms (fairseq_attn_core/backends/distance/triton_*.py)
and of RoPE's rotation (fairseq_attn_core/rope_fused.py)
under Triton's CPU interpreter (a child process: triton_interpreter.py), against the float64
references of distance_refs.py: output and the gradients of q, k, v and the table (T5's
bias table, Shaw's key and value tables), in float64, tolerance 1e-9 (the cases: triton_cases.py); Shaw's
terms in fp16 too, norm-wise against float64 from the same rounded inputs. bf16 runs on a GPU only (the
interpreter's bf16 tl.dot is wrong): benchmarks/gpu_checks.sh.
"""

import dataclasses

import pytest
import torch
from torch.testing import assert_close

import triton_cases
from distance_refs import alibi64, shaw64, t5bias64
from fairseq_attn_core.pieces.alibi import alibi_slopes
from fairseq_attn_core.pieces.rope import rotate
from fairseq_attn_core.backends.distance import DistanceForm, DistanceTerms
from fairseq_attn_core.backends.distance.triton_configs import (BlockConfig, Form, choose, configs_for, far_tiles_merged,
                                                                  shift_band_tiles)
from fairseq_attn_core.backends.distance import triton_configs, triton_launch
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


def test_a_call_past_the_kernels_32_bit_offsets_is_refused_in_one_line():
    """The kernels' offsets are int32: a call whose tensors they would index past 2^31 - 1 is refused before anything
    is allocated or launched (expanded views: no memory), for each of the largest tensors; one just inside passes."""
    def call(T, D=64, clip=0, configs=None):
        q = torch.zeros(1, dtype=torch.float16).expand(1, 1, T, D)
        terms = DistanceTerms(key_table=torch.zeros(2 * clip + 1, D), clip=clip) if clip else DistanceTerms(
            slopes=(0.5,))
        return triton_attention(terms, q, q, q, 1.0, configs=configs or configs_for(D))
    limit = triton_launch.MAX_OFFSET
    assert 2 ** 25 * 64 > limit >= (2 ** 25 - 1) * 64
    with pytest.raises(ValueError, match=r"32-bit offsets: this call \(B 1, H 1, T 33554432, S 33554432, head size "
                                         r"64\) needs 2,147,483,648, above 2,147,483,647;"):
        call(2 ** 25)  # the outputs
    with pytest.raises(ValueError, match="needs 2,155,872,256"):
        call(2 ** 23, clip=128)  # Shaw's (B H, T, 2k + 1) tables: 257 a row
    with pytest.raises(ValueError, match="needs 2,155,872,256"):
        call(2 ** 21, clip=128, configs=triton_configs.SMALL)  # d w_K's shares: one (257, 64) each 16 rows
    q = torch.zeros(1, dtype=torch.float16).expand(1, 1, 2 ** 25 - 1, 64)
    triton_launch._check_offsets(q, q, q, 0, configs_for(64))  # just inside: no refusal


def test_the_blocks_chosen_per_form_and_length():
    """triton_configs.choose: each kernel's plain blocks, those of the terms that do more per pair, the
    partial-tile blocks where a length leaves a partial tile, backward_kv's merged blocks (in the
    FEW_REGS form) only where its far tiles run in one loop and the lengths fill their tiles, and
    backward_q's wide far tiles for Shaw's terms without the causal mask, and the last key tile moved back."""
    c = configs_for(64)
    got = choose(c, Form(), 1024, 1024)
    assert (got.forward, got.backward_q, got.backward_kv, got.few_regs) == (c.forward, c.backward_q, c.backward_kv, False)
    keys = Form(keys=True)
    assert far_tiles_merged(keys, "backward_kv") and not far_tiles_merged(keys, "forward")
    got = choose(c, keys, 1024, 1024)
    assert (got.backward_q, got.backward_kv, got.few_regs) == (c.backward_q_terms, c.backward_kv_keys_merged, True)
    assert (got.backward_q_far, choose(c, Form(keys=True, values=True), 1024, 1024).backward_q_far) == (64, 64)
    assert choose(c, Form(keys=True, causal=True), 1024, 1024).backward_q_far == 0  # no band tile fewer there
    assert choose(c, keys, 1056, 1056).backward_q_far == 0  # whole 32-key tiles, a partial 64-key one
    assert choose(c, keys, 1000, 1000).backward_q_far == 64  # partial tiles at both widths: masked loads in both
    ampere = configs_for(64, (8, 0))  # backward_q's wide far tiles there too (64 keys, its band tiles 32), the forward's not
    assert (choose(ampere, keys, 1024, 1024).backward_q_far, choose(ampere, Form(keys=True, values=True), 1024,
                                                                    1024).forward_far) == (64, 0)
    assert (got.forward_far, choose(c, Form(keys=True, values=True), 1024, 1024).forward_far) == (0, 64)  # PB's bins
    assert choose(c, keys, 1000, 1000).forward_far == 64  # 128 x 32 there: narrower band tiles
    assert choose(c, Form(keys=True, values=True, causal=True), 1024, 1024).forward_far == 0
    got = choose(c, keys, 1000, 1000)  # partial tiles: the merged blocks would spill
    assert (got.forward, got.backward_kv, got.few_regs) == (c.forward_partial, c.backward_kv_keys, False)
    causal = Form(keys=True, causal=True)
    assert not far_tiles_merged(causal, "backward_kv")
    assert (choose(c, causal, 1024, 1024).backward_kv, choose(c, causal, 1024, 1024).few_regs) == (c.backward_kv_keys, False)
    t5 = Form(bias=1)
    assert far_tiles_merged(t5, "forward") and far_tiles_merged(t5, "backward_kv")
    got = choose(c, t5, 1024, 1024)
    assert (got.backward_kv, got.few_regs) == (c.backward_kv_bias, True)
    got = choose(c, dataclasses.replace(t5, table_grad=True), 1000, 1000)  # partial tiles: not the merged blocks
    assert (got.backward_q, got.backward_kv, got.few_regs) == (c.backward_q_table, c.backward_kv, False)
    assert choose(c, dataclasses.replace(t5, table_grad=True, causal=True), 1000, 1000).backward_q == c.backward_q_table
    values = Form(keys=True, values=True, causal=True)
    assert not far_tiles_merged(values, "backward_kv")
    assert far_tiles_merged(dataclasses.replace(values, causal=False), "backward_kv")
    assert not far_tiles_merged(dataclasses.replace(values, causal=False), "forward")
    got = choose(c, dataclasses.replace(values, causal=False), 1024, 1024)  # merged, on its own blocks
    assert (got.backward_kv, got.few_regs) == (c.backward_kv_values, False)
    assert choose(c, values, 1024, 1024).backward_kv == c.backward_kv_values
    assert choose(c, values, 1000, 1000).backward_kv == c.backward_kv_values
    assert choose(c, values, 1000, 1000).forward == c.forward_values
    # a partial last key tile moved back to end at the last key (whole loads): not for a bias by bucket, nor below a tile
    got = choose(c, Form(bias=2), 1000, 1000)
    assert (got.forward, got.forward_shift, got.backward_q_shift) == (c.forward, True, True)
    got = choose(c, Form(bias=2), 40, 40)  # shorter than the forward's 64-key tiles: the partial blocks' 32, moved
    assert (got.forward, got.forward_shift) == (c.forward_partial, True)
    got = choose(c, Form(bias=2), 20, 20)  # shorter than any of its key tiles: masked loads
    assert (got.forward, got.forward_shift) == (c.forward_partial, False)
    assert not choose(c, Form(bias=2), 1024, 1024).forward_shift
    # a bias by bucket's far tiles move too; its band tiles, and a table gradient's, stay (masked where partial)
    assert all((choose(c, Form(bias=1), 1000, 1000).forward_shift,
                choose(c, Form(bias=1, table_grad=True), 1000, 1000).backward_q_shift))
    assert not any(shift_band_tiles(f) for f in (Form(bias=1), Form(bias=1, table_grad=True)))
    assert not choose(c, Form(bias=1), 1000, 1000).band_shift and choose(c, keys, 1000, 1000).band_shift
    assert all(shift_band_tiles(f) for f in (Form(bias=2), keys, Form(keys=True, values=True, causal=True)))
    got = choose(c, keys, 1000, 1000)
    assert (got.forward, got.forward_shift, got.backward_q_shift, got.backward_kv_shift) == (c.forward_partial, True,
                                                                                             True, True)
    got = choose(c, keys, 1024, 1000)  # backward_kv loops over the queries: 1024 fill its tiles, 1000 keys do not
    assert (got.backward_kv_shift, got.forward_shift) == (False, True)
    assert choose(c, Form(bias=1), 1000, 1000).backward_kv_shift
    # the forward's moved-back tile after its far loop; on sm_80 not alibi's (it costs more there)
    assert choose(ampere, keys, 1000, 1000).forward_peel and not choose(ampere, Form(bias=2), 1000, 1000).forward_peel
    assert not choose(c, keys, 1024, 1024).forward_peel
    # backward_q's too; on sm_80 not with a table's gradient
    got = choose(ampere, Form(bias=1, table_grad=True), 1000, 1000)
    assert (got.backward_q_shift, got.backward_q_peel, choose(ampere, Form(bias=1), 1000, 1000).backward_q_peel) == (
        True, False, True)
    # Hopper peels every form (peel_every_form): the spills that costs sit outside the loops
    for form in (Form(bias=2), Form(bias=1, table_grad=True), keys):
        got = choose(c, form, 1000, 1000)
        assert (got.forward_peel, got.backward_q_peel) == (True, True), form
    # backward_delta's own rows (fewer d a_V shares), else backward_q's on 4 warps
    assert choose(c, Form(keys=True, values=True), 1024, 1024).backward_delta == c.backward_delta
    got = choose(ampere, Form(keys=True, values=True), 1024, 1024)
    assert got.backward_delta == BlockConfig(got.backward_q.block_m, 0, 4, 1)
    # no merged blocks on Ampere: the far tiles in one loop on the plain ones
    assert (choose(ampere, keys, 1024, 1024).backward_kv, choose(ampere, keys, 1024, 1024).few_regs) == (
        ampere.backward_kv, False)


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
    elif method == "plain":  # attention without terms: alibi's reference with every slope 0
        out = alibi64(*leaves, [0.0] * H, x["scale"], x["kpm"], causal=causal)[0]
    else:
        out = alibi64(*leaves, alibi_slopes(H), x["scale"], x["kpm"], causal=causal)[0]
    return out.detach(), torch.autograd.grad(out, leaves, x["dout"])


def ids(kind):
    return ["-".join(map(str, c)) for c in triton_cases.CASES[kind]]


@pytest.mark.parametrize("index", range(len(triton_cases.CASES["bias"])), ids=ids("bias"))
def test_bias_kernel_matches_float64_reference(results, index):
    check(triton_cases.CASES["bias"][index], index, results["bias"][index])


@pytest.mark.parametrize("index", range(len(triton_cases.CASES["plain"])), ids=ids("plain"))
def test_kernels_with_every_term_off_match_float64_reference(results, index):
    """The static model's baseline (every term off, one loop over the keys) computes attention without terms."""
    check(triton_cases.CASES["plain"][index], index, results["plain"][index])


@pytest.mark.parametrize("index", range(len(triton_cases.CASES["keys"])), ids=ids("keys"))
def test_shaw_key_term_matches_float64_reference(results, index):
    check(triton_cases.CASES["keys"][index], index, results["keys"][index])


@pytest.mark.parametrize("index", range(len(triton_cases.CASES["values"])), ids=ids("values"))
def test_shaw_value_term_matches_float64_reference(results, index):
    check(triton_cases.CASES["values"][index], index, results["values"][index])


#: norm-wise relative error allowed for the fp16 cases: about twice the largest seen (5.2e-4, d w_K at T 113); any one
#: of the four bin and table operands rounded to bf16 instead of fp16 reaches 1.5e-3 to 2.6e-3
HALF_TOL = 1e-3


@pytest.mark.parametrize("index", range(len(triton_cases.CASES["half"])), ids=ids("half"))
def test_shaw_terms_in_fp16_match_float64_reference(results, index):
    """fp16 inputs and tables: the kernels round PB and dQA to fp16 for their products with the tables, as
    FA2 rounds P and dS; every output and gradient stays within HALF_TOL of float64 on the same rounded inputs."""
    case = triton_cases.CASES["half"][index]
    got = results["half"][index]
    expected_out, expected = reference(case, triton_cases.half(triton_cases.inputs(case, seed=index)))
    assert got["out"].dtype == torch.float16 and len(got["grads"]) == len(expected)
    for name, a, e in zip(("out", "q", "k", "v", "table", "value table"), [got["out"], *got["grads"]],
                          [expected_out, *expected]):
        assert e.abs().max() > 0, name  # the comparison is not vacuous
        err = float((a.double() - e).norm() / e.norm())
        assert err <= HALF_TOL, f"{name}: norm-wise error {err:.2e} above {HALF_TOL}"


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
