"""The CSAN paper's Table 1 and Figures 2-3 as commands (fairseq-attn-paper, recipes/*/table1.sh,
figure2.sh, figure3.sh, fairseq-attn-demo --archs table1)."""

import json
import os
import random
import subprocess
import sys
from collections import Counter

import pytest
import sacrebleu
import torch

import fairseq_attn_plugins  # noqa: F401  registers the architectures
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq_attn_reports import claims as claims_mod
from fairseq_attn_reports.cli import paper
from fairseq_attn_recipes import demo
from fairseq_attn_reports import figures, results, table1
from fairseq_attn_reports.study_paths import load_table
from fairseq_attn_records.toy_corpus import make_corpus, write_corpus

sys.path.insert(0, os.path.dirname(__file__))
from run_records import write_record  # noqa: E402
from shared_builds import build_once, copy_of  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = os.path.join(ROOT, "recipes", "wmt14_en_de")
CI_ROWS = "baseline,rel_pos,csan1d,csan2d"
PNG = b"\x89PNG\r\n\x1a\n"
# the runs of the recipe tests: QUICK=1's sizes, trained 8 updates with a save point every 4 (the two
# averaged), not the profile's 40: what they check needs trained runs, not good ones
UPDATES = 8


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


# ------------------------------------------------------------------ the rows
def test_rows_are_the_papers():
    assert [r.key for r in table1.ROWS] == ["baseline", "bi_direct", "rel_pos", "neighbor", "local_hard",
                                            "local_soft", "block", "cnns", "csan1d", "csan2d"]
    assert len({r.arch for r in table1.ROWS}) == len(table1.ROWS)
    assert all(r.arch.startswith("transformer_") and r.arch.endswith("_wmt_en_de") for r in table1.ROWS)
    # the paper's printed delta column equals BLEU minus the baseline's 27.31
    printed = [0.27, 0.32, 0.29, 0.42, 0.50, 0.28, 0.39, 0.55, 0.87]
    assert [round(r.paper_bleu - table1.ROWS[0].paper_bleu, 2) for r in table1.ROWS[1:]] == printed
    assert table1.ROWS[0].label == "Transformer-Base Vaswani et al. (2017)"
    assert table1.ROWS[-1].label == "+ 2D-CSans"


def test_resolve_rows_never_skips_a_missing_arch():
    everything = [r.arch for r in table1.ROWS]
    assert table1.resolve_rows("all", everything) == list(table1.ROWS)
    # paper order whatever the order asked
    assert [r.key for r in table1.resolve_rows("csan2d, baseline,rel_pos", everything)] == \
        ["baseline", "rel_pos", "csan2d"]
    without = [a for a in everything if a not in ("transformer_localsoft_wmt_en_de", "transformer_cnns_wmt_en_de")]
    with pytest.raises(table1.Table1Error) as e:
        table1.resolve_rows("all", without)
    msg = str(e.value)
    assert "Local_Soft (transformer_localsoft_wmt_en_de)" in msg and "Cnns (transformer_cnns_wmt_en_de)" in msg
    assert "--rows baseline,bi_direct,rel_pos,neighbor,local_hard,block,csan1d,csan2d" in msg
    assert [r.key for r in table1.resolve_rows("baseline,block", without)] == ["baseline", "block"]
    with pytest.raises(table1.Table1Error, match="transformer_localsoft_wmt_en_de"):
        table1.resolve_rows("baseline,local_soft", without)
    for spec, match in (("baseline,nope", "unknown row.*nope"), ("csan1d,csan2d", "include 'baseline'"),
                        ("baseline", "at least one other"), ("baseline,csan1d,csan1d", "twice")):
        with pytest.raises(table1.Table1Error, match=match):
            table1.resolve_rows(spec, everything)


def test_rows_command_and_demo_name_the_missing_arch(monkeypatch, capsys, tmp_path):
    real = table1.registered_archs()
    monkeypatch.setattr(table1, "registered_archs",
                        lambda: [a for a in real if a != "transformer_csan1d_wmt_en_de"])
    assert paper.main(["rows", "--rows", CI_ROWS]) == 1
    assert "1D-CSans (transformer_csan1d_wmt_en_de)" in capsys.readouterr().err
    with pytest.raises(demo.DemoError, match=r"--archs table1: .*transformer_csan1d_wmt_en_de"):
        demo.resolve_archs("table1")
    assert demo.main(["--quick", "--out-dir", str(tmp_path / "d"), "--archs", "table1"]) == 1
    assert "transformer_csan1d_wmt_en_de" in capsys.readouterr().err and not (tmp_path / "d").exists()
    monkeypatch.setattr(table1, "registered_archs", lambda: real + [r.arch for r in table1.ROWS])
    assert demo.resolve_archs("table1") == [r.arch for r in table1.ROWS]
    assert paper.main(["rows", "--rows", "csan2d,baseline"]) == 0
    assert capsys.readouterr().out.splitlines() == ["baseline transformer_attn_wmt_en_de",
                                                    "csan2d transformer_csan2d_wmt_en_de"]


def plain_ngram_stats(hyps, refs):
    """Clipped n-gram matches and hypothesis n-grams (n = 1..4), counted by hand on whitespace tokens."""
    counts, totals = [0] * 4, [0] * 4
    for hyp, ref in zip(hyps, refs):
        h, r = hyp.split(), ref.split()
        for n in range(1, 5):
            hc, rc = Counter(), Counter()
            for i in range(len(h) - n + 1):
                hc[tuple(h[i:i + n])] += 1
            for i in range(len(r) - n + 1):
                rc[tuple(r[i:i + n])] += 1
            for gram, c in hc.items():
                counts[n - 1] += min(c, rc[gram])
            totals[n - 1] += max(len(h) - n + 1, 0)
    return counts, totals


def perturbed(refs, seed, p):
    rng = random.Random(seed)
    out = []
    for r in refs:
        w = r.split()
        if rng.random() < p and len(w) > 2:
            i = rng.randrange(len(w) - 1)
            w[i], w[i + 1] = w[i + 1], w[i]
        if rng.random() < p:
            w = w[:-1] + [w[0]]
        out.append(" ".join(w))
    return out


@pytest.mark.parametrize("tokenize", ["none", "13a"])  # toy target words: 13a tokenises them as whitespace
def test_ngram_improvement_equals_plain_counting(tokenize):
    refs = [t for _, t in make_corpus(120, seed=3)]
    base, sys1 = perturbed(refs, 1, 0.7), perturbed(refs, 2, 0.3)
    data = figures.ngram_improvement(refs, ("base", base), [("sys", sys1)], tokenize)
    prec = {}
    for name, hyps, got in (("base", base, data["baseline"]), ("sys", sys1, data["systems"][0])):
        counts, totals = plain_ngram_stats(hyps, refs)
        assert got["counts"] == counts and got["totals"] == totals
        prec[name] = torch.tensor([100.0 * c / t for c, t in zip(counts, totals)], dtype=torch.float64)
        torch.testing.assert_close(torch.tensor(got["precisions"], dtype=torch.float64), prec[name])
    torch.testing.assert_close(torch.tensor(data["systems"][0]["improvement"], dtype=torch.float64),
                               prec["sys"] - prec["base"])
    assert all(g > 0 for g in data["systems"][0]["improvement"])  # fewer perturbations, better n-grams


def test_figure_commands_write_pngs(tmp_path, capsys):
    refs = [t for _, t in make_corpus(60, seed=4)]
    (tmp_path / "ref").write_text("\n".join(refs) + "\n")
    runs = {}
    csan1d, csan2d = "transformer_csan1d_wmt_en_de", "transformer_csan2d_wmt_en_de"
    for name, p, arch, flags in (("w3", 0.6, csan1d, ("--csan-window", "3")), ("w11", 0.2, csan1d, ("--csan-window", "11")),
                                 ("h1", 0.5, csan2d, ("--csan-heads", "1")), ("h3", 0.1, csan2d, ("--csan-heads", "3"))):
        d = tmp_path / name
        write_record(d, arch, *flags)
        (d / "hyp.txt").write_text("\n".join(perturbed(refs, len(name) + int(p * 10), p)) + "\n")
        runs[name] = d
    # a second seed of heads 3: the same run record but for its seed
    seed2 = tmp_path / "h3_seed2"
    rec = json.loads((runs["h3"] / "run.json").read_text())
    rec.update(run_id=rec["run_id"][::-1], seed=2, training=dict(rec["training"], seed=2))
    seed2.mkdir()
    (seed2 / "run.json").write_text(json.dumps(rec))
    (seed2 / "hyp.txt").write_text("\n".join(perturbed(refs, 99, 0.3)) + "\n")
    # the baseline's line from its runs (two seeds), scored as the points are
    bases = []
    for seed, p in ((1, 0.7), (2, 0.65)):
        d = tmp_path / f"base_seed{seed}"
        write_record(d, table1.ROW_BY_KEY["baseline"].arch, seed=seed)
        (d / "hyp.txt").write_text("\n".join(perturbed(refs, 50 + seed, p)) + "\n")
        bases.append(str(d))
    ref = str(tmp_path / "ref")
    assert paper.main(["figure2", "--ref", ref, "--window", f"11={runs['w11']}", f"3={runs['w3']}",
                       "--heads", f"1={runs['h1']}", f"3={runs['h3']}", f"3={seed2}", "--png", str(tmp_path / "f2.png"),
                       "--json", str(tmp_path / "f2.json"), "--md", str(tmp_path / "f2.md"), "--baseline", *bases]) == 0
    assert (tmp_path / "f2.png").read_bytes()[:8] == PNG
    f2 = load_table(str(tmp_path / "f2.json"))  # its paths relative to its folder, read back
    assert [p["value"] for p in f2["windows"]] == [3, 11] and [p["value"] for p in f2["heads"]] == [1, 3]
    assert f2["baseline"]["run_dirs"] == bases and f2["baseline_bleu"] == f2["baseline"]["bleu"]
    for p in f2["windows"] + f2["heads"] + [f2["baseline"]]:
        per = [sacrebleu.corpus_bleu(read(os.path.join(d, "hyp.txt")), [refs]).score for d in p["run_dirs"]]
        assert p["bleu_per_seed"] == pytest.approx(per)
        mean = sum(per) / len(per)
        std = (sum((b - mean) ** 2 for b in per) / (len(per) - 1)) ** 0.5 if len(per) > 1 else None
        assert p["bleu"] == pytest.approx(mean) and p["bleu_std"] == (None if std is None else pytest.approx(std))
    assert f2["heads"][1]["seeds"] == [1, 2] and f2["heads"][1]["run_dirs"] == [str(runs["h3"]), str(seed2)]
    h3 = f2["heads"][1]
    assert f"| 2D-CSAN heads (window 11) | 3 | 2 | {h3['bleu']:.2f} ± {h3['bleu_std']:.2f} |" in (tmp_path / "f2.md").read_text()
    # committed (study-export) and re-scored from its outputs; a point's BLEU changed: named
    from fairseq_attn_reports import study_bundle
    study_bundle.export(str(tmp_path / "f2.json"), str(tmp_path / "results"), "f2")
    committed = tmp_path / "results" / "f2.json"
    cmp = study_bundle.rescore(str(committed))
    base = f2["baseline"]
    assert f"| baseline | - | 2 | {base['bleu']:.2f} ± {base['bleu_std']:.2f} |" in (tmp_path / "f2.md").read_text()
    assert cmp.diffs == [] and cmp.checked == sum(len(p["seeds"]) + 2 for p in f2["windows"] + f2["heads"] + [base]) + 1
    # seeds, mean, std of each point and of the baseline; the line's value
    doc = json.loads(committed.read_text())
    doc["heads"][1]["bleu_per_seed"][1] += 0.01
    committed.write_text(json.dumps(doc))
    diffs = study_bundle.rescore(str(committed)).diffs  # the edited field, and the cell re-scored
    assert [d.split(": ")[0] for d in diffs] == ["f2.json", "f2.json.heads[3].bleu_per_seed[1]"]
    assert diffs[0].endswith("(fields: heads)")
    assert paper.main(["figure3", "--ref", ref, "--baseline", f"base={runs['w3']}/hyp.txt",
                       "--system", f"a={runs['w11']}/hyp.txt", f"b={runs['h3']}/hyp.txt",
                       "--png", str(tmp_path / "f3.png"), "--json", str(tmp_path / "f3.json")]) == 0
    assert (tmp_path / "f3.png").read_bytes()[:8] == PNG
    f3 = json.loads((tmp_path / "f3.json").read_text())
    assert [s["name"] for s in f3["systems"]] == ["a", "b"] and f3["orders"] == [1, 2, 3, 4]
    # each system with what its run record says it trained, whatever it is called; a file: unknown
    capsys.readouterr()
    assert paper.main(["figure3", "--ref", ref, "--baseline", f"base={runs['w3']}/hyp.txt",
                       "--system", f"a_2d_run={runs['w11']}", f"b={runs['h3']}/hyp.txt",
                       "--png", str(tmp_path / "f3.png"), "--json", str(tmp_path / "f3.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| system | Architecture: pieces | 1-gram |")
    assert "| base (accuracy) | ? |" in out and "| b (gap) | ? |" in out
    assert f"| a_2d_run (gap) | {csan1d}: csan1d |" in out and "so the architecture is unknown." in out
    f3 = json.loads((tmp_path / "f3.json").read_text())
    assert f3["baseline"]["trained_model"] is None and f3["systems"][1]["trained_model"] is None
    assert f3["systems"][0]["trained_model"]["arch"] == csan1d and f3["systems"][0]["trained_model"]["pieces"] == ["csan1d"]
    # bad input: one-line errors, nothing written
    capsys.readouterr()
    assert paper.main(["figure2", "--ref", ref, "--window", f"x={runs['w3']}", "--png", str(tmp_path / "x.png")]) == 1
    assert paper.main(["figure2", "--ref", ref, "--window", f"5={tmp_path}", "--png", str(tmp_path / "x.png")]) == 1
    err = capsys.readouterr().err
    assert "'x' is not an integer" in err and f"{tmp_path} has no run record" in err
    # a label whose run is another: named, both sides (the record, not the folder name, says what it is)
    for args, says in ((["--window", f"5={runs['w3']}"], f"--window 5 expects --csan-window 5, but {runs['w3']} was "
                                                         f"trained with 3"),
                       (["--window", f"3={runs['h1']}"], f"--window 3 expects a csan1d run, but {runs['h1']} trained "
                                                         f"{csan2d}"),
                       (["--heads", f"3={runs['h1']}"], f"--heads 3 expects --csan-heads 3, but {runs['h1']}"),
                       (["--window", f"3={runs['w3']}", f"3={runs['w3']}/"], "are the same run"),
                       (["--window", f"3={runs['w3']}", "--baseline", str(runs["w11"])],
                        f"--baseline expects a run of {table1.ROW_BY_KEY['baseline'].arch}, but {runs['w11']} trained"),
                       (["--window", f"3={runs['w3']}", "--baseline", bases[0], "--baseline-bleu", "3"],
                        "give --baseline RUN_DIR... (scored here) or --baseline-bleu, not both")):
        assert paper.main(["figure2", "--ref", ref, *args, "--png", str(tmp_path / "x.png")]) == 1
        assert says in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


TRAIN_LOG = """\
2026-01-01 | INFO | fairseq_cli.train | num. shared model params: {params:,} (num. trained: {params:,})
2026-01-01 | INFO | train | {{"epoch": 1, "train_loss": "7.0", "train_wps": "100", "train_ups": "{ups}", "train_num_updates": "10"}}
"""


def test_table1_layout_from_runs(tmp_path):
    refs = [t for _, t in make_corpus(150, seed=5)]
    (tmp_path / "ref").write_text("\n".join(refs) + "\n")
    spec = {"baseline": (41_500, 2.5, 0.5), "rel_pos": (41_500 + 1_234, 2.25, 0.9), "csan2d": (41_500, 2.4, 0.5)}
    for key, (params, ups, keep) in spec.items():
        d = tmp_path / "runs" / key
        write_record(d, table1.ROW_BY_KEY[key].arch)
        (d / "train.log").write_text(TRAIN_LOG.format(params=params, ups=ups))
        hyps = [r if (i * 7919 % 100) / 100 < keep else " ".join(r.split()[::-1]) for i, r in enumerate(refs)]
        (d / "hyp.txt").write_text("\n".join(hyps) + "\n")
    out = tmp_path / "t.json"
    assert paper.main(["table1", "--ref", str(tmp_path / "ref"), "--runs-dir", str(tmp_path / "runs"),
                       "--rows", "baseline,rel_pos,csan2d", "--no-base-size", "--ar-trials", "1000",
                       "--json", str(out), "--md", str(tmp_path / "t.md")]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["key"] for r in rows] == ["baseline", "rel_pos", "csan2d"]
    assert rows[1]["params_delta"] == 1234 and rows[2]["params_delta"] == 0
    assert rows[1]["speed_delta"] == pytest.approx(-0.25) and rows[2]["speed_delta"] == pytest.approx(-0.1)
    md = (tmp_path / "t.md").read_text().splitlines()
    bleu = {r["key"]: r["bleu"] for r in rows}
    assert md[2].startswith(f"| Transformer-Base Vaswani et al. (2017) | 41.5K | 2.50 | {bleu['baseline']:.2f} | - |")
    # the better system: significant in both tests -> the paper's double arrow
    assert rows[1]["mark"] == "**" and md[3].startswith(
        f"| + Rel_Pos Shaw et al. (2018) | +1.2K | -0.25 | {bleu['rel_pos']:.2f}⇑ | "
        f"{bleu['rel_pos'] - bleu['baseline']:+.2f} |")
    assert md[3].endswith("| +0.1M | -0.11 | 27.63 | +0.32 |")
    # same translations as the baseline: no mark
    assert md[4].startswith(f"| + 2D-CSans | +0.0M | -0.10 | {bleu['csan2d']:.2f} | +0.00 |")
    assert not any("Trained differently" in line for line in md)


def test_table1_rows_are_checked_against_the_run_records(tmp_path, capsys, monkeypatch):
    """The Rel_Pos and 2D-CSAN folders swapped: an error naming the row and the run, not "Rel_Pos +0.0M";
    runs of other lengths or data-bins: flagged in the table."""
    refs = [t for _, t in make_corpus(40, seed=5)]
    (tmp_path / "ref").write_text("\n".join(refs) + "\n")
    for key, arch_key, updates, data in (("baseline", "baseline", 60, "data-a"), ("rel_pos", "csan2d", 200, "data-b"),
                                         ("csan2d", "rel_pos", 60, "data-a")):
        d = tmp_path / "runs" / key
        write_record(d, table1.ROW_BY_KEY[arch_key].arch, num_updates=updates, data_id=data)
        (d / "train.log").write_text(TRAIN_LOG.format(params=41_500, ups=2.5))
        (d / "hyp.txt").write_text("\n".join(refs) + "\n")
    args = ["table1", "--ref", str(tmp_path / "ref"), "--runs-dir", str(tmp_path / "runs"), "--no-base-size",
            "--ar-trials", "100", "--bs-samples", "100"]
    assert paper.main(args + ["--rows", "baseline,rel_pos,csan2d"]) == 1
    err = capsys.readouterr().err
    assert (f"Table 1 row rel_pos (Rel_Pos) expects a run of transformer_relpos_wmt_en_de, but "
            f"{tmp_path / 'runs' / 'rel_pos'} trained transformer_csan2d_wmt_en_de") in err
    # fixed: the rows' own runs; the one trained 200 updates on another data-bin is flagged
    os.rename(tmp_path / "runs" / "rel_pos", tmp_path / "runs" / "x")
    os.rename(tmp_path / "runs" / "csan2d", tmp_path / "runs" / "rel_pos")
    os.rename(tmp_path / "runs" / "x", tmp_path / "runs" / "csan2d")
    monkeypatch.delenv("COMET_MODEL", raising=False)
    assert paper.main(args + ["--rows", "baseline,rel_pos,csan2d", "--md", str(tmp_path / "t.md")]) == 0
    assert capsys.readouterr().err.count("COMET left out") == 1  # said once, as fairseq-attn-results says it
    assert paper.main(args + ["--rows", "baseline,rel_pos,csan2d", "--no-comet-hint"]) == 0  # a study said it already
    assert "COMET left out" not in capsys.readouterr().err
    md = (tmp_path / "t.md").read_text()
    assert "| + 2D-CSans † |" in md and "| + Rel_Pos Shaw et al. (2018) |" in md
    assert "updates differ: baseline 60, rel_pos 60, csan2d 200" in md
    assert "data-bin differ: baseline /data/data-a (data-a), rel_pos /data/data-a (data-a), csan2d /data/data-b (data-b)" in md


# ------------------------------------------------------------------ the recipe, end to end
def recipe(script, env, check=True):
    full = dict(os.environ, PYTHON=sys.executable, WORKERS="1", OMP_NUM_THREADS="1", NGPUS="0", BPE_MERGES="60",
                MAX_UPDATE=str(UPDATES), SAVE_INTERVAL_UPDATES=str(UPDATES // 2))
    full["PATH"] = os.path.dirname(sys.executable) + os.pathsep + full["PATH"]
    full.update(env)
    p = subprocess.run(["bash", os.path.join(RECIPE, script)], env=full, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"{script} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def _prepare_toy_work(root):
    """The toy pair (fairseq_attn_records.toy_corpus) as local corpus files, prepared by prepare.sh."""
    write_corpus(os.path.join(root, "data"), "en", "de", (("train", 300), ("valid", 30), ("test", 40)), seed=1)
    recipe("prepare.sh", _toy_env(root, os.path.join(root, "work")))


def _toy_env(root, work):
    env = {"WORK": work, "QUICK": "1"}
    for split in ("train", "valid", "test"):
        env[f"{split.upper()}_SRC"] = os.path.join(root, "data", f"{split}.en")
        env[f"{split.upper()}_TGT"] = os.path.join(root, "data", f"{split}.de")
    return env


@pytest.fixture
def toy_work(tmp_path):
    """A prepared WORK of its own for each test (a copy of one prepared once per test run): the
    tests train their runs in it side by side, in any order, in any worker."""
    root = build_once("table1_toy_work", _prepare_toy_work)
    return _toy_env(root, copy_of(os.path.join(root, "work"), str(tmp_path / "work")))


def real_param_count(run_dir):
    from fairseq import checkpoint_utils
    models, _ = checkpoint_utils.load_model_ensemble([os.path.join(run_dir, "checkpoint_last.pt")])
    return sum(p.numel() for p in models[0].parameters())


def built_params(arch):
    """The parameters of ``arch`` built at its own (base) size, counted plainly here (the table's
    count is kept per code: this is not read from that cache)."""
    from fairseq_attn_plugins.bench.systems import build_model, make_dictionary
    model = build_model(arch, make_dictionary(1000), None, seed=0)
    count = 0
    for p in model.parameters():
        count += p.numel()
    return count


def plain_mean_std(values):
    m = sum(values) / len(values)
    return m, (sum((v - m) ** 2 for v in values) / (len(values) - 1)) ** 0.5


def check_table1(out, work, keys, seeds):
    """Table 1 over seeds against each run's own files: its translations scored again by sacreBLEU,
    its parameters counted in its checkpoint, its steps per second read from its train.log."""
    table = load_table(os.path.join(out, "table1.json"))
    md = read(os.path.join(out, "table1.md"))
    head = [c.strip() for c in md[0].split("|")[1:-1]]
    refs = read(os.path.join(work, "raw", "test.de"))
    assert [r["key"] for r in table["rows"]] == keys
    base = table["rows"][0]
    base_full = built_params(base["arch"])
    for i, r in enumerate(table["rows"]):
        dirs = [os.path.join(out, "runs", f"{r['key']}_seed{s}") for s in seeds]
        assert r["run_dirs"] == dirs and r["seeds"] == [int(s) for s in seeds]
        assert r["hyps"] == [os.path.join(d, "test", "hyp.txt") for d in dirs]
        bleu = [sacrebleu.corpus_bleu(read(h), [refs]).score for h in r["hyps"]]
        assert r["bleu_per_seed"] == pytest.approx(bleu)
        mean, std = plain_mean_std(bleu)
        assert r["bleu_mean"] == pytest.approx(mean) and r["bleu_std"] == pytest.approx(std)
        assert {real_param_count(d) for d in dirs} == {r["params"]}
        logs = [results.parse_train_log(os.path.join(d, "train.log")) for d in dirs]
        assert r["train_ups_per_seed"] == pytest.approx([lg["train_ups"] for lg in logs])
        # and per epoch, read plainly from the epoch lines of each train.log (the claims check them for other work)
        epochs = [[float(json.loads(line[line.index("{"):])["train_ups"]) for line in read(os.path.join(d, "train.log"))
                   if " | train | " in line] for d in dirs]
        assert r["train_ups_epochs_per_seed"] == epochs and all(epochs)
        assert [lg["num_updates"] for lg in logs] == [UPDATES] * len(seeds)
        cells = [c.strip() for c in md[2 + i].split("|")[1:-1]]
        assert cells[0] == table1.ROW_BY_KEY[r["key"]].label and cells[1] == str(len(seeds))
        assert cells[head.index("BLEU (mean ± std)")].startswith(f"{mean:.2f} ± {std:.2f}")
        if i == 0:
            assert r["base_size_params"] == base_full and cells[2] == table1.fmt_params(r["params"])
            continue
        # the row's mark only when every seed pair is marked (the pairs: each seed against each baseline seed)
        assert len(r["pairs"]) == len(seeds) ** 2
        assert cells[head.index("pairs sig.")] == f"{sum(1 for p in r['pairs'] if p['mark'])}/{len(seeds) ** 2}"
        assert r["mark"] == "" or all(p["mark"] for p in r["pairs"])
        assert r["params_delta"] == r["params"] - base["params"] and cells[2] == table1.fmt_params_delta(r["params_delta"])
        assert r["speed_delta"] == pytest.approx(plain_mean_std(r["train_ups_per_seed"])[0]
                                                 - plain_mean_std(base["train_ups_per_seed"])[0])
        assert cells[3] == f"{r['speed_delta']:+.2f}"
        assert r["base_size_params_delta"] == built_params(r["arch"]) - base_full
    return table


@pytest.mark.e2e
def test_table1_recipe_end_to_end(toy_work, tmp_path):
    """Table 1 over two seeds trained to CONVERGE's rule by table1.sh (the baseline and 2D-CSAN: the
    seeds' all-pairs marks, steps per second measured per run, the Training length of every run);
    a re-run trains nothing; other settings are refused; the claims of the paper from its record;
    the study exported and re-scored; Figure 3 from the first seed. (Every architecture of the table
    trains in test_e2e_cli; ROWS=all is resolved in the tests above.)"""
    work = toy_work["WORK"]
    keys, seeds = ["baseline", "csan2d"], ["1", "2"]
    env = dict(toy_work, ROWS=",".join(keys), SEEDS=" ".join(seeds), CONVERGE="1")
    p = recipe("table1.sh", env)
    assert (p.stdout + p.stderr).count("COMET left out") == 1  # the study says it once, its table step not again
    out = os.path.join(work, "table1_converge1")  # CONVERGE's own folder
    assert "| Model | Seeds | Parameter | Speed |" in p.stdout
    table = check_table1(out, work, keys, seeds)
    assert table["rows"][1]["params_delta"] == 0 and table["rows"][1]["base_size_params_delta"] == 0  # +0.0M
    # CONVERGE: fairseq's patience on every run, and where each stopped, from its run record
    for key in keys:
        for s in seeds:
            assert "--patience 1" in open(os.path.join(out, "runs", f"{key}_seed{s}", "train.log")).read()
    assert "## Training length" in read(os.path.join(out, "table1.md"))
    assert [(t["system"], t["updates"]["per_seed"]) for t in table["training"]] == [(k, [UPDATES] * 2) for k in keys]
    assert all(set(t["stopped"]) <= {"cap", "patience"} for t in table["training"])

    # a re-run: every run reused, nothing trained again
    p = recipe("table1.sh", env)
    for key in keys:
        for s in seeds:
            assert f"table1 {key} seed {s}: done before, reused" in p.stderr
    assert "ARCH=" not in p.stderr
    # other settings in the same folder are refused
    p = recipe("table1.sh", dict(env, MAX_UPDATE=str(UPDATES + 1)), check=False)
    assert p.returncode == 1 and "other settings" in p.stderr

    # carried to another machine: the finished runs packed without checkpoints and unpacked into
    # another study folder; table1.sh there trains nothing and renders the same table
    carried, archive = os.path.join(work, "table1_carried"), str(tmp_path / "carried.tar.xz")
    for args in (["study-pack", out, "--to", archive], ["study-unpack", archive, "--to", carried]):
        c = subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", *args], capture_output=True, text=True)
        assert c.returncode == 0, c.stderr
    assert not [f for _, _, files in os.walk(carried) for f in files if f.endswith(".pt")]
    p = recipe("table1.sh", dict(env, TABLE1_DIR=carried))
    assert "ARCH=" not in p.stderr and p.stderr.count(": done before, reused") == len(keys) * len(seeds)
    with open(os.path.join(out, "table1.json"), encoding="utf-8") as f:
        here = f.read()
    with open(os.path.join(carried, "table1.json"), encoding="utf-8") as f:
        there = f.read()
    assert json.loads(there) == json.loads(here.replace(out, carried))
    assert read(os.path.join(carried, "table1.md")) == read(os.path.join(out, "table1.md"))

    # the paper's claims from the study's record: each comparison is the table's own test
    claims = tmp_path / "claims.json"
    assert paper.main(["claims", "--table1", os.path.join(out, "table1.json"), "--json", str(claims),
                       "--md", str(tmp_path / "claims.md")]) == 0
    said = {c["id"]: c for c in json.loads(claims.read_text())["claims"]}
    first = said["improve"]["comparisons"][0]
    assert (first["better"], first["than"]) == ("csan2d", "baseline")
    assert first["pairs_better"] == table["rows"][1]["pairs_marked"]
    assert said["outperform"]["verdict"] == claims_mod.OPEN  # no existing work in this table

    # committed and re-checked: every cell re-scored from the exported outputs
    from fairseq_attn_reports import study_bundle
    study_bundle.export(os.path.join(out, "table1.json"), str(tmp_path / "results"), "table1_toy")
    cmp = study_bundle.rescore(str(tmp_path / "results" / "table1_toy.json"))
    assert cmp.diffs == [] and cmp.checked > 20
    # the claims again from the committed study alone (its outputs read from the bundle)
    assert paper.main(["claims", "--table1", str(tmp_path / "results" / "table1_toy.json"),
                       "--json", str(tmp_path / "again.json")]) == 0
    again = json.loads((tmp_path / "again.json").read_text())["claims"]
    assert [(c["verdict"], c["comparisons"]) for c in again] == [(c["verdict"], c["comparisons"]) for c in said.values()]

    # Figure 3 from the first seed of the Table 1 runs: sacreBLEU's statistics, checked by plain counting
    recipe("figure3.sh", dict(env, FIG3_ROWS="csan2d"))
    f3 = json.load(open(os.path.join(out, "figure3.json")))
    assert open(os.path.join(out, "figure3.png"), "rb").read(8) == PNG
    refs = read(os.path.join(work, "raw", "test.de"))
    base_c, base_t = plain_ngram_stats(read(os.path.join(out, "runs", "baseline_seed1", "test", "hyp.txt")), refs)
    assert [s["name"] for s in f3["systems"]] == ["csan2d"]
    c, t = plain_ngram_stats(read(os.path.join(out, "runs", "csan2d_seed1", "test", "hyp.txt")), refs)
    gap = [100.0 * a / b - 100.0 * x / y if b and y else None for a, b, x, y in zip(c, t, base_c, base_t)]
    for g, want in zip(f3["systems"][0]["improvement"], gap):
        if want is not None:
            assert g == pytest.approx(want)


def test_table1_recipe_refuses_missing_rows_before_work(tmp_path):
    work = tmp_path / "work"
    p = recipe("table1.sh", {"WORK": str(work), "ROWS": "baseline,nope"}, check=False)
    assert p.returncode == 1 and "ROWS=baseline,nope: give the Table 1 rows" in p.stderr and not work.exists()
    missing = [r for r in table1.ROWS if r.arch not in ARCH_MODEL_REGISTRY]
    if not missing:
        pytest.skip("every Table 1 architecture is registered: nothing is missing")
    p = recipe("table1.sh", {"WORK": str(work)}, check=False)  # ROWS=all
    assert p.returncode == 1 and not work.exists()
    for r in missing:
        assert f"{r.name} ({r.arch})" in p.stderr


@pytest.mark.e2e
def test_figure2_recipe(toy_work, tmp_path):
    """Figure 2 by figure2.sh, with CURVE: each run's checkpoint of that update evaluated too (the point
    of Figure 2 stays the run's own average), and the Training length of its runs."""
    work = toy_work["WORK"]
    p = recipe("figure2.sh", dict(toy_work, WINDOWS="3", HEADS="3", CURVE=str(UPDATES)))
    assert "1D-CSAN window 3: BLEU" in p.stdout and "2D-CSAN heads 3: BLEU" in p.stdout
    out = os.path.join(work, "figure2")
    assert open(os.path.join(out, "figure2.png"), "rb").read(8) == PNG
    f2 = load_table(os.path.join(out, "figure2.json"))
    refs = read(os.path.join(work, "raw", "valid.de"))  # the paper's Figure 2 is on the validation set
    for p_, run, flags in ((f2["windows"][0], "csan1d_w3", "--csan-window 3"),
                           (f2["heads"][0], "csan2d_h3", "--csan-window 11 --csan-heads 3")):
        assert p_["run_dir"] == os.path.join(out, "runs", run) and p_["value"] == 3
        assert p_["hyps"] == [os.path.join(p_["run_dir"], "valid", "hyp.txt")]
        hyps = read(os.path.join(p_["run_dir"], "valid", "hyp.txt"))
        assert p_["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
        log = open(os.path.join(p_["run_dir"], "train.log"), encoding="utf-8").read()
        assert flags in log  # the sweep's flag reached fairseq-train
        # CURVE: the single checkpoint of that update, evaluated on the same subset, in the curve's table
        curve = read(os.path.join(p_["run_dir"], "curve", f"u{UPDATES}", "valid", "hyp.txt"))
        row = next(r for r in load_table(os.path.join(out, "curve.json"))["rows"] if r["system"] == run)
        assert row["k"]["1"]["bleu"]["per_seed"] == [pytest.approx(sacrebleu.corpus_bleu(curve, [refs]).score)]
    assert "## Training length" in read(os.path.join(out, "figure2.md"))


@pytest.mark.parametrize("script, env, says", [
    ("table1.sh", {"SEEDS": "1 2 1"}, 'SEEDS="1 2 1": seed 1 is given twice'),
    ("figure2.sh", {"HEADS": "1,5"}, "HEADS=1,5: 5 is above the encoder's 4 attention heads"),
])
def test_bible_studies_refuse_a_setting_before_any_work(tmp_path, script, env, says):
    """The bible's Table 1 and Figure 2 (its CPU preset: 4 encoder heads): a setting that cannot run is
    one line before anything is written."""
    work = tmp_path / "work"
    full = dict(os.environ, PYTHON=sys.executable, WORK=str(work), **env)
    full["PATH"] = os.path.dirname(sys.executable) + os.pathsep + full["PATH"]
    p = subprocess.run(["bash", os.path.join(ROOT, "recipes", "bible_grc_en", script)], env=full,
                       capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr.splitlines()[-1].startswith(f"error: {says}"), p.stderr
    assert not work.exists()


def test_demo_writes_table1_only_for_table1_rows(tmp_path):
    out = tmp_path / "demo"
    refs = [t for _, t in make_corpus(80, seed=6)]
    (out / "corpus").mkdir(parents=True)
    (out / "corpus" / "test.tgt").write_text("\n".join(refs) + "\n")
    archs = ["transformer_attn_wmt_en_de", "transformer_csan2d_wmt_en_de", "transformer_disan_wmt_en_de"]
    for i, arch in enumerate(archs):
        d = out / "runs" / arch
        write_record(d, arch)
        (d / "train.log").write_text(TRAIN_LOG.format(params=1000 + i, ups=2.0 + i))
        (d / "hyp.txt").write_text("\n".join(perturbed(refs, i, 0.5)) + "\n")
    profile = dict(demo.PROFILES["quick"], ar_trials=200, bs_samples=200)
    demo.Pipeline(str(out), profile, archs[:2], 1, 1).write_table1()
    t = json.loads((out / "table1.json").read_text())
    assert [r["key"] for r in t["rows"]] == ["baseline", "csan2d"] and t["rows"][1]["params_delta"] == 1
    assert t["rows"][1]["base_size_params_delta"] == 0  # CSAN adds no parameters at base size either
    assert "| + 2D-CSans | +1 | +1.00 |" in (out / "table1.md").read_text()
    # disan is not a Table 1 row: no table1, and none left from before
    demo.Pipeline(str(out), profile, [archs[0], archs[2]], 1, 1).write_table1()
    assert not (out / "table1.json").exists() and not (out / "table1.md").exists()


def test_figures_read_text_by_the_shared_rules(tmp_path):
    """Figures 2 and 3 read references and outputs as every score does: CRLF endings are line
    endings (the same n-gram statistics as LF), and bytes that are not UTF-8 are one line naming
    the file."""
    refs = [t for _, t in make_corpus(30, seed=9)]
    hyps = perturbed(refs, 1, 0.3)
    lf, crlf = tmp_path / "lf.txt", tmp_path / "crlf.txt"
    lf.write_bytes(("\n".join(hyps) + "\n").encode("utf-8"))
    crlf.write_bytes(("\r\n".join(hyps) + "\r\n").encode("utf-8"))
    assert figures.system_hyps(str(lf), "lf", str(crlf)) == hyps
    assert figures.ngram_statistics(figures.system_hyps(str(lf), "x", str(crlf)), refs) == \
        figures.ngram_statistics(hyps, refs)
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("Stra\u00dfe\n".encode("latin-1"))
    with pytest.raises(ValueError, match=f"{latin}: not UTF-8 .*line 1"):
        figures.system_hyps(str(lf), "latin", str(latin))
