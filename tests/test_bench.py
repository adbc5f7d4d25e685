"""Smoke test of fairseq-attn-bench (tiny CPU config) and checks of its arithmetic; the ``bible`` preset
is the recipes' profile, ``--data-bin`` and the report ``fairseq-attn-paper claims --speed`` reads.

No timing thresholds: speed goals live in the benchmark's own output.
"""

import gc
import json
import os
import shlex
import statistics
import weakref

import pytest
import torch

import fairseq_attn_plugins  # noqa: F401
from fairseq.models import ARCH_MODEL_NAME_REGISTRY
from cli_helpers import PLUGIN_DIR, shared_data
from fairseq_attn_plugins import bench as B
from fairseq_attn_plugins.bench.run import corpus
from fairseq_attn_plugins.cli import bench
from fairseq_attn_recipes.fairseq_args import train_args
from fairseq_attn_recipes.profiles import profile
from fairseq_attn_reports import side_by_side


def registered_variants():
    """Written independently of the benchmark: every base arch of transformer_attn."""
    out = []
    for arch, model in ARCH_MODEL_NAME_REGISTRY.items():
        if model == "transformer_attn" and arch.endswith("_wmt_en_de") and "vaswani" not in arch:
            out.append(arch[len("transformer_"): -len("_wmt_en_de")])
    return out


# the tests of the tiny report run in one worker, which measures it once (pytest-xdist --dist loadgroup)
pytestmark = pytest.mark.xdist_group("bench_tiny_report")


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    js, md = folder / "out.json", folder / "out.md"
    rc = bench.main(["--device", "cpu", "--preset", "tiny", "--mode", "all", "--threads", "1",
                     "--json", str(js), "--markdown", str(md)])
    assert rc == 0
    return json.loads(js.read_text()), md.read_text()


def test_every_system_is_measured(tiny_report):
    report, _ = tiny_report
    variants = registered_variants()
    assert "attn" in variants and "csan1d" in variants
    names = [s["name"] for s in report["systems"]]
    assert names == ["fairseq"] + variants
    assert [s["arch"] for s in report["systems"]][0] == "transformer_wmt_en_de"
    for section in ("train", "infer"):
        assert list(report[section]["systems"]) == names
    for L in ("8", "16"):
        assert list(report["sweep"]["lengths"][L]["systems"]) == names
    meta = report["meta"]
    assert meta["device"] == "cpu" and meta["preset"] == "tiny" and meta["torch"] == torch.__version__


def test_train_figures_and_ratio_arithmetic(tiny_report):
    report, _ = tiny_report
    train = report["train"]["systems"]
    ref_runs = train["fairseq"]["tokens_per_s"]["runs"]
    assert len(ref_runs) == B.PRESETS["tiny"]["repeats"]
    for name, e in train.items():
        runs = e["tokens_per_s"]["runs"]
        assert all(r > 0 for r in runs)
        assert e["tokens_per_s"]["median"] == pytest.approx(statistics.median(runs))
        paired = [a / b for a, b in zip(runs, ref_runs)]
        assert e["ratio"]["runs"] == pytest.approx(paired)
        assert e["ratio"]["median"] == pytest.approx(statistics.median(paired))
        assert e["ratio"]["min"] == pytest.approx(min(paired))
        half_range = (max(paired) - min(paired)) / 2
        assert e["ratio"]["spread"] == pytest.approx(half_range / statistics.median(paired))
        assert e["peak_mem_mb"] >= e["static_mem_mb"] > 0
        assert e["mem_ratio"] == pytest.approx(e["peak_mem_mb"] / train["fairseq"]["peak_mem_mb"])
    assert train["fairseq"]["ratio"]["median"] == pytest.approx(1.0)
    # static state: fp32 weights + 2 Adam moments = 3 x 4 bytes per parameter,
    # plus Adam's 4-byte step counter per parameter tensor
    for s in report["systems"]:
        expected = 12 * s["params"] + 4 * s["param_tensors"]
        assert train[s["name"]]["static_mem_mb"] * 2**20 == pytest.approx(expected)


def test_verdicts_follow_targets(tiny_report):
    report, md = tiny_report
    train = report["train"]["systems"]
    for name, v in report["verdicts"].items():
        target = B.speed_target(name)
        assert v["speed_target"] == target
        r = train[name]["ratio"]
        noisy = (r["max"] - r["min"]) / 2 > 0.03 * statistics.median(r["runs"])
        if target is None:
            assert v["speed"] == "n/a"
        elif noisy:
            assert v["speed"] == "unmeasured"
        else:
            assert v["speed"] == ("PASS" if r["median"] >= target else "MISS")
        # memory: 1.15 for relpos, 1.10 for systems whose attention is all fused
        paths = next(s["attention_paths"] for s in report["systems"] if s["name"] == name)
        fused_only = paths["explicit"] == 0
        expected = 1.15 if name.startswith("relpos") else (1.10 if fused_only else None)
        assert v["memory_target"] == expected
        if expected is not None:
            ok = train[name]["mem_ratio"] <= expected
            assert v["memory"] == ("PASS" if ok else "MISS")
    for name in train:
        assert f"| {name} |" in md
    assert "PASS" in md or "MISS" in md or "unmeasured" in md
    for name, e in train.items():  # every ratio printed with its spread
        assert f"{e['ratio']['median']:.3f} +-{100 * e['ratio']['spread']:.1f}%" in md


def test_inference_and_sweep(tiny_report):
    report, _ = tiny_report
    inf = report["infer"]["systems"]
    # every system decodes exactly the longest source of each batch, then EOS
    cfg = B.PRESETS["tiny"]
    batches = B.make_gen_batches(B.make_dictionary(cfg["vocab"]), cfg["gen_sents"], cfg["gen_batch"],
                                 cfg["max_src"], 1, "cpu")
    expected = sum((int(b["net_input"]["src_lengths"].max()) + 1) * b["nsentences"] for b in batches)
    expected /= sum(b["nsentences"] for b in batches)
    assert expected > 2
    for e in inf.values():
        assert e["mean_output_len"] == pytest.approx(expected)
    ref = inf["fairseq"]["sentences_per_s"]["runs"]
    # every measurement runs the preset's rounds and records them
    rounds = B.PRESETS["tiny"]["repeats"]
    assert report["infer"]["rounds"] == report["train"]["rounds"] == report["sweep"]["rounds"] == rounds
    assert len(ref) == rounds
    for e in inf.values():
        assert e["ratio"]["runs"] == pytest.approx([a / b for a, b in zip(e["sentences_per_s"]["runs"], ref)])
    # the sweep's lengths (16) fit the 256 positions the models were built with for training
    assert report["sweep"]["models"] == "built for training" and report["sweep"]["build_errors"] == {}
    for L, entry in report["sweep"]["lengths"].items():
        assert entry["batch"] == max(1, B.PRESETS["tiny"]["sweep_tokens"] // int(L))
        stock = entry["systems"]["fairseq"]["tokens_per_s"]["runs"]
        for e in entry["systems"].values():
            assert e["ratio"]["median"] == pytest.approx(
                statistics.median([a / b for a, b in zip(e["tokens_per_s"]["runs"], stock)]))


def test_speed_and_memory_targets_per_variant():
    assert B.speed_target("attn") == 0.98
    assert B.speed_target("csan1d") == B.speed_target("disan") == B.speed_target("dropattn_c") == 0.95
    assert B.speed_target("csan2d") == B.speed_target("relpos") == 0.93
    assert B.speed_target("chained") == B.speed_target("convoluted") == 0.80
    assert B.speed_target("something_new") is None
    assert B.is_windowed("csan2d") and not B.is_windowed("relpos")



def summary(runs):
    med = statistics.median(runs)
    return {"median": med, "min": min(runs), "max": max(runs), "runs": runs,
            "spread": (max(runs) - min(runs)) / 2 / med}


def test_spread_and_unmeasured_rule():
    runs = [0.95, 0.97, 0.96, 0.94, 0.98]
    s = B.summarize(runs)
    assert s["spread"] == pytest.approx(0.02 / 0.96)  # half of 0.98 - 0.94, over the median
    assert B.paired_ratios([2.0, 3.0], [4.0, 5.0])["runs"] == pytest.approx([0.5, 0.6])
    tight = summary([0.96, 0.95, 0.97])  # +-1.04 %
    assert B.target_status(tight, 0.95) == "PASS" and B.target_status(tight, 0.97) == "MISS"
    wide = summary([0.90, 0.96, 0.99])  # +-4.7 %: never judged
    assert B.target_status(wide, 0.8) == B.target_status(wide, 0.99) == "unmeasured"
    assert B.target_status(summary([0.975, 1.0, 1.025]), 1.0) == "PASS"  # +-2.5 %: measured
    assert B.target_status(summary([0.965, 1.0, 1.035]), 1.0) == "unmeasured"  # +-3.5 %
    assert B.target_status(summary([1.0]), 0.5) == "unmeasured"  # one round has no spread
    assert B.target_status(tight, None) == "n/a"
    assert B.fmt_ratio(tight) == "0.960 +-1.0%"


def test_memory_and_long_targets():
    assert B.memory_target("relpos", fused_only=False) == 1.15
    assert B.memory_target("attn", fused_only=True) == 1.10
    assert B.memory_target("disan", fused_only=False) is None
    report = {"systems": [{"name": "relpos", "attention_paths": {"explicit": 0}},
                          {"name": "csan1d", "attention_paths": {"explicit": 0}}],
              "sweep": {"lengths": {"1024": {"systems": {
                  "fairseq": {"ratio": summary([1.0, 1.0]), "mem_ratio": 1.0},
                  "relpos": {"ratio": summary([0.71, 0.72]), "mem_ratio": 1.6},
                  "csan1d": {"ratio": summary([1.3, 1.6]), "mem_ratio": 1.0}}}}}}
    v = B.verdicts(report, {})
    assert v["relpos"] == {"long_1024": "PASS", "long_1024_memory": "MISS"}
    assert v["csan1d"] == {"long_1024": "unmeasured"}  # +-10 %


def test_flop_formula_against_loops():
    """train_flops vs a plain count of every matmul of one forward, times 3."""
    d = B.make_dictionary(64)
    batches = B.make_train_batches(d, 96, 2, 12, seed=2, device="cpu")
    sizes = dict(embed=16, ffn=32, heads=4, layers=3)
    D, F, N, V = 16, 32, 3, len(d)
    total = 0
    for b in batches:
        bsz, S = b["net_input"]["src_tokens"].shape
        T = b["target"].size(1)
        for _ in range(bsz):
            for _layer in range(N):
                for _tok in range(S):  # encoder: q, k, v, out projections; FFN in and out
                    total += 4 * (2 * D * D) + 2 * (2 * D * F) + 2 * S * D + 2 * S * D
                for _tok in range(T):  # decoder: self + cross attention (8 projections), FFN
                    total += 8 * (2 * D * D) + 2 * (2 * D * F)
                    total += 2 * T * D + 2 * T * D + 2 * S * D + 2 * S * D
            total += T * 2 * D * V
    assert B.train_flops(sizes, V, batches) == pytest.approx(3 * total)
    big = dict(sizes, embed=32, ffn=64, heads=8)
    assert B.scaling_sizes(B.PRESETS["tiny"]) == {"base": sizes, "big": big}
    assert B.scaling_sizes(B.PRESETS["base"])["big"] == dict(embed=1024, ffn=4096, heads=16, layers=6)


def test_scaling_mode_reports_time_and_flop_ratio(tmp_path):
    js, md = tmp_path / "s.json", tmp_path / "s.md"
    rc = bench.main(["--preset", "tiny", "--mode", "scaling", "--threads", "1",
                     "--json", str(js), "--markdown", str(md)])
    assert rc == 0
    sc = json.loads(js.read_text())["scaling"]
    base, big = sc["seconds"]["base"]["runs"], sc["seconds"]["big"]["runs"]
    assert len(base) == B.PRESETS["tiny"]["repeats"] and all(t > 0 for t in base + big)
    paired = [a / b for a, b in zip(big, base)]
    assert sc["time_ratio"]["median"] == pytest.approx(statistics.median(paired))
    assert sc["flop_ratio"] == pytest.approx(sc["flops_per_pass"]["big"] / sc["flops_per_pass"]["base"])
    assert 2.0 < sc["flop_ratio"] < 4.5  # twice the width: ~4x the d^2 terms, ~2x attention
    text = md.read_text()
    assert f"vs FLOP ratio {sc['flop_ratio']:.3f}" in text


def test_timer_on_cpu_measures_elapsed_time():
    import time

    t = B.Timer("cpu").start()
    time.sleep(0.05)
    assert 0.04 < t.stop() < 1.0


def test_measurements_run_collected_with_the_collector_off_and_the_heap_frozen():
    """Each measurement: the previous one's cyclic garbage collected before it, the collector off
    inside, the long-lived heap frozen; all put back after the rounds, also when one fails."""
    class Cycle:
        pass

    def cyclic_garbage():
        c = Cycle()
        c.me = c
        ref = weakref.ref(c)
        del c
        return ref

    seen, left = [], []

    def measure(name, r):
        seen.append((name, gc.isenabled(), gc.get_freeze_count() > 0, all(ref() is None for ref in left)))
        left.append(cyclic_garbage())
        if r == 1 and name == "b":
            raise RuntimeError("a failing measurement")
        return 1.0

    enabled = gc.isenabled()
    assert B.interleaved(["a", "b"], 1, measure, log=lambda *_: None) == {"a": [1.0], "b": [1.0]}
    assert gc.isenabled() == enabled
    frozen_by_session = gc.get_freeze_count()
    gc.unfreeze()  # the session's freeze (conftest.py) undone, to see the benchmark's own undone after
    try:
        with pytest.raises(RuntimeError, match="a failing measurement"):
            B.interleaved(["a", "b"], 2, measure, log=lambda *_: None)
        assert gc.get_freeze_count() == 0 and gc.isenabled() == enabled
    finally:
        if frozen_by_session:
            gc.freeze()
    assert seen == [("a", False, True, True), ("b", False, True, True)] * 2 + [("b", False, True, True)]


def test_batches_are_fairseq_like():
    d = B.make_dictionary(50)
    a = B.make_train_batches(d, 200, 3, 30, seed=5, device="cpu")
    b = B.make_train_batches(d, 200, 3, 30, seed=5, device="cpu")
    assert len(a) == 3
    for x, y in zip(a, b):  # identical batches for every system
        assert torch.equal(x["net_input"]["src_tokens"], y["net_input"]["src_tokens"])
    pad, eos = d.pad(), d.eos()
    for batch in a:
        src, tgt = batch["net_input"]["src_tokens"], batch["target"]
        prev = batch["net_input"]["prev_output_tokens"]
        bsz = src.size(0)
        width = max(src.size(1), tgt.size(1))
        assert bsz * width <= 200 or bsz == 1
        assert (src[:, -1] == eos).all()  # left-padded: every source ends with EOS
        for i in range(bsz):
            n = int(tgt[i].ne(pad).sum())
            assert tgt[i, n - 1] == eos and (tgt[i, n:] == pad).all()
            assert prev[i, 0] == eos and torch.equal(prev[i, 1:n], tgt[i, : n - 1])
            m = int(src[i].ne(pad).sum())
            assert int(batch["net_input"]["src_lengths"][i]) == m
        assert batch["ntokens"] == int(tgt.ne(pad).sum())


def test_numerics_mode_on_cpu(tmp_path):
    js = tmp_path / "num.json"
    rc = bench.main(["--mode", "numerics", "--threads", "1", "--systems", "attn,csan*", "--json", str(js)])
    assert rc == 0
    num = json.loads(js.read_text())
    assert set(num["archs"]) == {f"transformer_{v}_wmt_en_de" for v in registered_variants()
                                 if v == "attn" or v.startswith("csan")}
    for e in num["archs"].values():
        assert e["ok"] and e["finite"]
        assert e["fused_vs_explicit_out"] < 1e-5 and e["fused_vs_explicit_grad"] < 1e-5


def test_bad_flags_fail_clearly(capsys):
    with pytest.raises(SystemExit, match="fp16 needs --device cuda"):
        bench.main(["--dtype", "fp16"])
    with pytest.raises(SystemExit, match="matches none of the registered variants"):
        bench.main(["--preset", "tiny", "--systems", "no_such_variant"])
    with pytest.raises(SystemExit):
        bench.main(["--repeats", "0"])
    assert "must be >= 1" in capsys.readouterr().err


def test_tensor_peak_sees_a_short_lived_allocation():
    """The CPU sweep's memory: live tensor bytes replayed from torch's allocation records."""
    with B.TensorPeak() as mem:
        a = torch.ones(1 << 20)  # 4 MiB, freed before the block ends
        a.add_(1)
        del a
        b = torch.ones(1 << 18)  # 1 MiB
        del b
    assert 4 * 2**20 <= mem.peak_bytes < 5 * 2**20


def test_timed_blocks_on_cpu_run_no_memory_sampler():
    """RSS sampling is a thread beside the timed steps: the CPU sweep's timed blocks run none (their
    memory is TensorPeak's, in a pass of its own); the training bench's PeakMemory does sample."""
    import threading
    cpu = torch.device("cpu")
    before = threading.active_count()
    with B.timing.timed_peak(cpu) as mem:
        assert mem is None and threading.active_count() == before
    with B.PeakMemory(cpu) as mem:
        assert threading.active_count() == before + 1
        a = torch.ones(1 << 23)  # 32 MiB, touched
        a.add_(1)
    del a
    assert mem.peak_bytes > 0


def test_position_sweep_lengths(tmp_path):
    """--sweep lengths: stock and each position method on each CPU training path, time and
    memory ratios to stock from the interleaved rounds (arithmetic checked here; one short
    length, ``--lengths 8``, instead of 32 ... 1024 to keep the test short)."""
    js = tmp_path / "sweep.json"
    rc = bench.main(["--device", "cpu", "--preset", "tiny", "--sweep", "lengths", "--threads", "1",
                     "--lengths", "8", "--systems", "relpos_kv/*,rope/*", "--repeats", "3",
                     "--json", str(js)])
    assert rc == 0
    report = json.loads(js.read_text())
    # --repeats N: N rounds, recorded
    assert report["sweep"]["rounds"] == 3
    assert {len(e["tokens_per_s"]["runs"]) for e in report["sweep"]["lengths"]["8"]["systems"].values()} == {3}
    names = [s["name"] for s in report["systems"]]
    assert names == ["fairseq", "relpos_kv/explicit", "relpos_kv/auto", "rope/explicit", "rope/fused"]
    paths = {s["name"]: s["attention_paths"] for s in report["systems"]}
    assert paths["rope/explicit"]["explicit"] == 6 and paths["rope/fused"]["fused"] == 6
    assert list(report["sweep"]["lengths"]) == ["8"]
    for L, entry in report["sweep"]["lengths"].items():
        stock = entry["systems"]["fairseq"]
        for name in names[1:]:
            e = entry["systems"][name]
            runs = [a / b for a, b in zip(stock["tokens_per_s"]["runs"], e["tokens_per_s"]["runs"])]
            assert e["time_ratio"]["median"] == pytest.approx(statistics.median(runs))
            assert e["peak_mem_mb"] > 0
            assert e["mem_ratio"] == pytest.approx(e["peak_mem_mb"] / stock["peak_mem_mb"])
        assert entry["systems"]["relpos_kv/auto"]["paths"] == {"explicit": 3}  # under 256: explicit
        assert entry["systems"]["rope/fused"]["paths"] == {"fused": 3}
    with pytest.raises(SystemExit, match="--sweep lengths is a sweep"):
        bench.main(["--sweep", "lengths", "--mode", "numerics"])
    assert report["meta"]["config"]["sweep_lengths"] == [8]


@pytest.mark.parametrize("value", ["0,8", "16,8", "8,8", "8,x", ""])
def test_sweep_lengths_refused_unless_increasing_positive(value, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--sweep", "lengths", "--lengths", value])
    assert "--lengths: expected positive integers in increasing order" in capsys.readouterr().err


def test_sweep_lengths_flag_needs_the_sweep():
    with pytest.raises(SystemExit, match="--lengths belongs to --sweep lengths"):
        bench.main(["--lengths", "8"])


def test_position_sweep_on_cuda_lists_auto_for_every_method():
    """On CUDA the GPU sweep measures ``auto`` for every method and forced ``flex`` where a
    method has a flex path; on CPU ``auto`` only where it differs from fused, never flex."""
    cuda = [s.name for s in B.position_sweep_systems(None, "cuda")]
    cpu = [s.name for s in B.position_sweep_systems(None, "cpu")]
    methods = [name for name, _, _ in B.POSITION_METHODS]
    assert [m for m in methods if f"{m}/auto" in cuda] == methods
    assert [m for m in methods if f"{m}/flex" in cuda] == list(B.systems.FLEX_METHODS)
    assert not any(name.endswith("/flex") for name in cpu)
    assert "rope/auto" not in cpu and "relpos_kv/auto" in cpu
    assert set(cpu) <= set(cuda)


def test_sweep_reports_a_failing_system_and_measures_the_rest():
    """A system whose step raises (a kernel that does not compile, say) is reported with its
    error, in the report and the tables; the others are still measured."""
    cfg = dict(B.PRESETS["tiny"], sweep_lengths=(8,), repeats=2)
    d = B.make_dictionary(cfg["vocab"])
    models = {name: B.build_model(arch, d, cfg["sizes"], 1, max_source_positions=16,
                                  max_target_positions=16)
              for name, arch in [(B.STOCK, "transformer_wmt_en_de"),
                                 ("rope/fused", "transformer_rope_wmt_en_de"),
                                 ("broken", "transformer_rope_wmt_en_de")]}

    def broken(*a, **k):
        raise RuntimeError("the kernel does not compile\nsecond line")

    models["broken"].encoder.forward = broken
    sweep = B.bench_sweep(models, cfg, torch.device("cpu"), 1, lambda *a: None)
    entry = sweep["lengths"]["8"]
    assert entry["failed"] == {"broken": "RuntimeError: the kernel does not compile"}
    assert set(entry["systems"]) == {B.STOCK, "rope/fused"}
    meta = B.meta(torch.device("cpu"), "tiny", "fp32", "sweep", cfg)
    text = B.render({"meta": meta, "systems": [], "sweep": sweep, "verdicts": {}})
    assert "| broken | RuntimeError |" in text
    assert "- **broken** failed at L = 8: RuntimeError: the kernel does not compile" in text


def test_layer_paths_name_the_length_dependent_paths():
    """The sweep records, per length, the path each encoder layer's training call takes."""
    cfg = B.PRESETS["tiny"]
    d = B.make_dictionary(cfg["vocab"])
    kv = B.build_model("transformer_relpos_wmt_en_de", d, cfg["sizes"], 1, max_source_positions=1024,
                       max_target_positions=1024)
    assert B.systems.layer_paths(kv.encoder, 512) == {"region split": 3}
    assert B.systems.layer_paths(kv.encoder, 8) == {"explicit": 3}
    c2 = B.build_model("transformer_csan2d_wmt_en_de", d, cfg["sizes"], 1, max_source_positions=1024,
                       max_target_positions=1024, csan_layers="0-1")
    assert B.systems.layer_paths(c2.encoder, 512) == {"block-local": 2, "fused": 1}


ROUNDS_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}


def rounds_held(report) -> set:
    """The numbers of rounds a fairseq-attn-bench report holds: the runs of each measured system."""
    held = set()
    for section in ("train", "infer"):
        for e in (report.get(section) or {}).get("systems", {}).values():
            held.add(len(e["ratio"]["runs"]))
    for entry in (report.get("sweep") or {}).get("lengths", {}).values():
        for e in entry.get("systems", {}).values():
            held.add(len(e["tokens_per_s"]["runs"]))
    return held


def test_every_sentence_about_rounds_in_results_matches_its_json():
    """Each section of benchmarks/RESULTS.md that names committed fairseq-attn-bench reports says
    only numbers of rounds those reports hold (read from their runs, not from their flags)."""
    import os
    import re

    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
    results = os.path.join(root, "results")
    reports = {}
    for name in os.listdir(results):
        if name.endswith(".json"):
            with open(os.path.join(results, name)) as f:
                report = json.load(f)
            if isinstance(report, dict) and "meta" in report and "systems" in report:
                reports[name] = rounds_held(report)
    assert reports["cpu_position_sweep_small_fp32.json"] == {2}
    text = open(os.path.join(root, "RESULTS.md"), encoding="utf-8").read()
    sections = re.split(r"\n(?=## )", text)
    claim = re.compile(r"\b(\d+|" + "|".join(ROUNDS_WORDS) + r")\*{0,2}\s+(?:interleaved\s+)?rounds\b", re.I)
    checked = 0
    for section in sections:
        named = {n for n in reports if re.search(r"(?<![\w.])" + re.escape(n), section)}
        if not named:
            continue
        held = set().union(*(reports[n] for n in named))
        for m in claim.finditer(section):
            said = m.group(1).lower()
            said = ROUNDS_WORDS.get(said) or int(said)
            assert said in held, (section.splitlines()[0], m.group(0), sorted(named), sorted(held))
            checked += 1
    assert checked >= 8


# ---------------------------------------------------------------------------
# At the Table 1 study's model size: the bible preset, --data-bin, the report the claims read
# ---------------------------------------------------------------------------
def _fairseq_train_model(data_bin, arch, settings):
    """The model fairseq-train builds from the recipes' arguments (its own parser and task)."""
    from fairseq import options, tasks

    args = options.parse_args_and_arch(options.get_training_parser(),
                                       train_args(data_bin, PLUGIN_DIR, arch, dict(settings, cpu="1")))
    return tasks.setup_task(args).build_model(args), args


def test_bible_preset_is_the_recipes_profile():
    """Sizes, batch tokens and dropout equal the profile's; built on a data-bin the benchmark's models
    count exactly the parameters of fairseq-train's from the profile (the claims compare these)."""
    settings = profile("bible")
    flags = shlex.split(settings["model_args"])
    given = dict(zip(flags[::2], flags[1::2]))
    cfg = B.PRESETS["bible"]
    for side in ("encoder", "decoder"):
        assert int(given[f"--{side}-layers"]) == cfg["sizes"]["layers"]
        assert int(given[f"--{side}-embed-dim"]) == cfg["sizes"]["embed"]
        assert int(given[f"--{side}-ffn-embed-dim"]) == cfg["sizes"]["ffn"]
        assert int(given[f"--{side}-attention-heads"]) == cfg["sizes"]["heads"]
    assert int(settings["max_tokens"]) == cfg["max_tokens"]
    data_bin = shared_data()
    src, tgt, _, _ = corpus(cfg, data_bin)
    for arch in ("transformer_attn_wmt_en_de", "transformer_csan2d_wmt_en_de"):
        theirs, args = _fairseq_train_model(data_bin, arch, settings)
        assert args.dropout == cfg["model"]["dropout"]
        assert args.share_decoder_input_output_embed and not args.share_all_embeddings
        ours = B.build_model(arch, src, cfg["sizes"], 1, tgt, **cfg["model"])
        assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())


def test_data_bin_measurement_is_what_the_claims_read(tmp_path):
    """``--data-bin``: the dictionaries and the training pairs' lengths of the data-bin (read here from its
    dictionary files and raw text); the rows' ratio to the attn baseline per round; the report read by
    :func:`side_by_side.read_bench`, refused at another parameter count."""
    data_bin = shared_data()
    js = tmp_path / "bench.json"
    assert bench.main(["--preset", "tiny", "--data-bin", data_bin, "--threads", "1", "--no-infer",
                       "--systems", "transformer_attn_wmt_en_de,csan2d", "--json", str(js)]) == 0
    report = json.loads(js.read_text())
    lines = sum(1 for _ in open(os.path.join(data_bin, "dict.src.txt"), encoding="utf-8"))
    data = report["meta"]["data"]
    assert data["vocab"] == {"source": lines + 4, "target": lines + 4}  # joined; 4 special symbols
    with open(os.path.join(os.path.dirname(data_bin), "raw", "train.src"), encoding="utf-8") as f:
        n_pairs = sum(1 for _ in f)
    assert (data["data_bin"], data["pair"], data["lengths"]) == (os.path.abspath(data_bin), "src-tgt", f"{n_pairs} train pairs")
    _, _, (src_len, tgt_len), _ = corpus(B.PRESETS["tiny"], data_bin)
    with open(os.path.join(os.path.dirname(data_bin), "raw", "train.tgt"), encoding="utf-8") as f:
        assert list(tgt_len) == [len(line.split()) + 1 for line in f]  # + EOS
    train = report["train"]
    assert [s["name"] for s in report["systems"]] == ["fairseq", "attn", "csan2d"] and train["baseline"] == "attn"
    base = train["systems"]["attn"]["tokens_per_s"]["runs"]
    for name, e in train["systems"].items():
        assert e["ratio_to_baseline"]["runs"] == pytest.approx([a / b for a, b in zip(e["tokens_per_s"]["runs"], base)])
    params = {s["name"]: s["params"] for s in report["systems"]}
    rows = {"baseline": {"params": params["attn"]}, "csan2d": {"params": params["csan2d"]}}
    read = side_by_side.read_bench(str(js), rows, ["baseline", "csan2d"])
    assert (read["rounds"], read["threads"], read["preset"]) == (B.PRESETS["tiny"]["repeats"], 1, "tiny")
    assert read["rows"]["csan2d"]["slowdowns"] == pytest.approx([1 - r for r in train["systems"]["csan2d"]["ratio_to_baseline"]["runs"]])
    with pytest.raises(ValueError, match="measured at another model size than the runs: row csan2d"):
        side_by_side.read_bench(str(js), dict(rows, csan2d={"params": params["csan2d"] + 1}), ["baseline", "csan2d"])
    with pytest.raises(ValueError, match="no measurement of Table 1 row csan1d"):
        side_by_side.read_bench(str(js), rows, ["baseline", "csan1d"])
