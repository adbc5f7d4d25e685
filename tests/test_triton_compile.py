"""The Triton kernels compiled for the GPUs they run on, without one: sm_90 (H100/H200) and
sm_80 (A100), read by benchmarks/triton_static_cost.py (ptxas -v, the SASS, the TTGIR). Every
kernel family the paths launch (forward, backward_kv, backward_q, the backward's delta,
rope's rotation) at its heaviest specialisation, at T = S = 128 (whole tiles of every block): t5bias
under the causal mask (its table's gradient), t5bias and relpos k without it (backward_kv's merged
blocks in their FEW_REGS form, 32 x 128 on 4 warps and 64 x 128 on 8 on Hopper: near the register
limit) and relpos kv (Shaw's key and value terms, the most state per tile); the lighter variants
compile the same code with terms switched off (the report reads them all). The same
at a length that leaves partial tiles (T = S = 1000: the launcher's EVEN_M / EVEN_N False, the kernels'
last tile moved back to end at the length, or t5bias's masked loads: what training's lengths run most), for the variants whose masked forms
spilled at some time (alibi's and relpos k's forward, which run triton_configs' ``forward_partial`` blocks there;
t5bias's backward_q, relpos kv's backward_kv under the causal mask; and relpos kv without
it, whose forward and backward_q run far tiles wider than their band tiles there too), and at
T = S = 1040 (a multiple of 16, other integer specialisations) for spills alone, unless one spills (alibi, relpos k,
relpos kv under the causal mask). Some forms again without a key
padding mask (``UNPADDED``: the kernels then compile without the padding column). One compile per
(launch, arch), shared by the tests of this module.
"""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.xdist_group("triton_compile")
#: a length that every block divides (before 2026-11-30 the test read L = 64, where backward_kv's merged blocks,
#: 128 keys wide, were not launched)
WHOLE_L = 128
SAMPLE = (("t5bias", True), ("t5bias", False), ("relpos k", False), ("relpos kv", False))
#: the launches of SAMPLE that must be backward_kv's merged blocks in their FEW_REGS form (sm_90)
FEW_REGS_SAMPLE = (("t5bias", False), ("relpos k", False))
#: lengths that no block divides (every kernel's last tiles partial), and the variants compiled there: 1000
#: read in full; 1040, a multiple of 16 (the launcher's ints then specialise as divisible by 16: other code),
#: for its registers and spills alone (ptxas -v; the loops' structure does not depend on it; the SASS too where
#: one spills), in the variants that spilled there at some time (alibi's forward on sm_90, relpos k's on sm_80,
#: relpos kv's causal backward_kv at 32 x 64, its backward_q on sm_80), and t5bias there (its far tiles move back,
#: its band tiles stay masked)
PARTIAL_L, PARTIAL_L16 = 1000, 1040
PARTIAL_SAMPLE = (("alibi", True), ("t5bias", False), ("t5bias", True), ("relpos k", False), ("relpos kv", True),
                  ("relpos kv", False))
PARTIAL16_SAMPLE = (("alibi", False), ("t5bias", False), ("relpos k", False), ("relpos kv", True), ("relpos kv", False))
#: forms without a key padding mask (a batch without padding: fairseq then passes none, and the kernels compile
#: without the padding column), where they spill outside their loops, and relpos kv (the most state per tile)
UNPADDED = {"whole": (("alibi", False), ("relpos k", False), ("relpos kv", False)),
            "partial": (("t5bias", False),), "partial16": (("t5bias", False),)}
ARCHS = (90, 80)
#: a spill outside the main loops is a store and a load a program (a value kept across the loops); blocks
#: that avoid it cost 2.5 to 43 % more (modelled, docs/explanation/benchmark.md). None is allowed inside one.
#: The most any form spills outside them: 72 B (relpos kv's backward_q on sm_80 at T = 1040)
MAX_SPILL_BYTES = 128
#: the kernels without a tile loop: their registers and spills alone are read (ptxas -v), not their SASS
NO_TILE_LOOP = ("backward_delta", "rotate_rows")


def _report():
    spec = importlib.util.spec_from_file_location("triton_static_cost", ROOT / "benchmarks" / "triton_static_cost.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reads():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    cost = _report()
    out = {}
    for L, sample in ((WHOLE_L, SAMPLE), (PARTIAL_L, PARTIAL_SAMPLE), (PARTIAL_L16, PARTIAL16_SAMPLE)):
        tiles = {WHOLE_L: "whole", PARTIAL_L: "partial", PARTIAL_L16: "partial16"}[L]
        forms = [(v, c, True) for v, c in sample] + [(v, c, False) for v, c in UNPADDED[tiles]]
        for variant, causal, padded in forms:
            for cap in ARCHS:  # the launches as the launcher makes them for that GPU (its blocks)
                recorded, kernels = cost.record(L, causal, variants=(variant,), cap=cap, padded=padded)
                for launch in recorded[variant][0]:
                    kw = launch["kwargs"]
                    if tiles != "whole" and "EVEN_M" in kw:  # a masked last tile: the queries', the keys' or both
                        assert not (kw["EVEN_M"] and kw["EVEN_N"]), (variant, causal, launch["kernel"], L)
                    if tiles == "whole" and cap == 90 and launch["kernel"] == "backward_kv":  # the forms read are the ones meant
                        assert kw["FEW_REGS"] == ((variant, causal) in FEW_REGS_SAMPLE), (variant, causal)
                    compiled = cost.compile_launch(getattr(kernels, launch["kernel"]), launch["args"], kw, cap)
                    name = cost.reading_key(variant, causal, padded)
                    out[(name, launch["kernel"], cap, tiles)] = read(cost, compiled, launch["kernel"], cap,
                                                                     spills_only=tiles == "partial16")
    calls, rope = cost.record_rope(WHOLE_L)
    for cap in ARCHS:
        launch = calls[0]
        compiled = cost.compile_launch(getattr(rope, launch["kernel"]), launch["args"], launch["kwargs"], cap)
        out[("rope", launch["kernel"], cap, "whole")] = read(cost, compiled, launch["kernel"], cap)
    return out


def read(cost, compiled, kernel, cap, spills_only=False):
    """The benchmark's reading of a kernel; of one without a tile loop, its registers and spills (the SASS
    disassembly, about 0.4 s a kernel, would find no main loop to check); with ``spills_only`` the same,
    unless it spills (the SASS then tells where)."""
    usage = cost.ptxas_usage(compiled.asm["ptx"], cap)
    if kernel in NO_TILE_LOOP or (spills_only and not (usage["spill_stores"] or usage["spill_loads"])):
        return usage
    return cost.read_kernel(compiled, cap)


def test_every_kernel_family_compiles_for_sm90_and_sm80_without_spills_in_its_loops(reads):
    """Whole tiles and partial ones (both lengths), with and without padding: no kernel spills inside a main
    loop on either GPU (the SASS: no local-memory instruction there), and none spills more than
    MAX_SPILL_BYTES outside them."""
    families = {"forward", "backward_delta", "backward_kv", "backward_q"}
    assert families | {"rotate_rows"} <= {k for _, k, _, _ in reads}
    cost = _report()
    for tiles, sample in (("whole", SAMPLE), ("partial", PARTIAL_SAMPLE), ("partial16", PARTIAL16_SAMPLE)):
        assert families <= {k for _, k, _, t in reads if t == tiles}
        names = {cost.reading_key(v, c) for v, c in sample} | {cost.reading_key(v, c, False) for v, c in UNPADDED[tiles]}
        assert {v for v, k, _, t in reads if t == tiles and k != "rotate_rows"} == names, tiles
    for (variant, kernel, cap, tiles), r in reads.items():
        where = f"{variant} {kernel} sm_{cap} {tiles} tiles"
        assert r["regs"] <= 255, where
        assert max(r["spill_stores"], r["spill_loads"]) <= MAX_SPILL_BYTES, f"{where} spills: {r}"
        for lp in r.get("main_loops", ()):
            assert lp["spill_instructions"] == 0, f"{where}: a spill inside a main loop"


def test_no_main_loop_has_a_loop_nested_in_it(reads):
    """A loop inside a main loop runs per tile and stops Triton pipelining the main loop;
    checked in the SASS and in the TTGIR (scf.for inside scf.for)."""
    for (variant, kernel, cap, tiles), r in reads.items():
        if "main_loops" not in r:  # registers and spills alone (``read``)
            continue
        assert r["main_loops"], (variant, kernel, cap, tiles)
        for lp in r["main_loops"]:
            assert lp["nested_loops"] == [], f"{variant} {kernel} sm_{cap} {tiles} tiles: a loop inside a main loop"
        assert r["nested_loops_in_ttgir"] == 0, (variant, kernel, cap, tiles)


def test_every_main_loop_is_pipelined(reads):
    """Each main loop's dot is fed by asynchronous copies or TMA loads (the TTGIR): blocks chosen to
    avoid a spill must not do it by giving up the pipeline (one stage)."""
    for (variant, kernel, cap, tiles), r in reads.items():
        for lp in r.get("main_loops", ()):
            assert lp["pipelined"], f"{variant} {kernel} sm_{cap} {tiles} tiles: a main loop not pipelined"


def test_the_torch_work_outside_the_kernels_is_counted():
    """The report counts the torch ops a path runs outside its kernels, each at its roofline, so moving
    work out of a kernel cannot look like a gain. Shaw's products are made by the kernels: relpos k and kv
    keep no matmul in torch. What stays is the sum of the kernels' per-program shares of the tables'
    gradients (one (2k + 1, D) share per program, at least one program per batch and head)."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    cost = _report()
    L = 64
    recorded = cost.record(L, False, variants=("relpos k", "relpos kv"), cap=90)[0]
    for variant, tables in (("relpos k", 1), ("relpos kv", 2)):
        ops = recorded[variant][1]
        assert not [o["op"] for o in ops if o["op"].startswith(("mm.", "bmm.", "addmm."))], variant
        shares = sum(o["bytes"] for o in ops if o["op"].startswith("sum."))
        assert shares >= tables * cost.B * cost.H * (2 * cost.CLIP + 1) * cost.D * 4, variant
        expected = 0.0
        for o in ops:  # each op at its roofline: bytes at the HBM rate, FLOPs at twice the FP32 lanes
            expected += max(o["bytes"] / (3.35e12 / (132 * 1.98e9)), o["flops"] / (2 * 128))
        assert abs(cost.outside_cycles(ops, 90) - expected / (cost.B * cost.H)) <= 1e-9 * expected
        assert cost.outside_cycles(ops, 90) >= shares / (3.35e12 / (132 * 1.98e9)) / (cost.B * cost.H)


def test_the_torch_work_counted_is_a_call_whose_shape_was_seen():
    """A shape's tables (t5bias's bucket of every distance, by the piece's own function, with its
    logarithm) are made by its first call and cached: the count is of the next call, the first
    call's torch work is kept apart and holds them."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    cost = _report()
    _, ops, first = cost.record(64, False, variants=("t5bias",), cap=90)[0]["t5bias"]
    assert any(o["op"].startswith("log.") for o in first)
    assert not any(o["op"].startswith("log.") for o in ops)
    assert cost.outside_cycles(ops, 90) < cost.outside_cycles(first, 90)
