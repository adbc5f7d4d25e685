"""BLEU, chrF++ and TER with their paired tests equal the real sacreBLEU command line;
COMET's tests draw sacreBLEU's resamples; bad input is one line naming the file."""

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from fairseq_attn_reports.cli import significance
from fairseq_attn_records import metrics as M
from fairseq_attn_records.toy_corpus import make_corpus

from test_significance import _noisy


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("metrics")
    refs = [t for _, t in make_corpus(80, seed=5)]
    paths = {}
    for name, lines in (("ref", refs), ("base", _noisy(refs, 0.35, 1)), ("good", _noisy(refs, 0.2, 2)),
                        ("close", _noisy(refs, 0.34, 4))):
        paths[name] = d / f"{name}.txt"
        paths[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _sacrebleu_cli_table(files, test, n, metrics):
    """The real ``sacrebleu REF -i BASE SYS... -m ... --paired-bs|--paired-ar`` text table
    (its -f json crashes on chrF's float32), read back: {system: {metric: (score, p)}}."""
    flag = ["--paired-bs", "--paired-bs-n", str(n)] if test == "bs" else ["--paired-ar", "--paired-ar-n", str(n)]
    out = subprocess.run([sys.executable, "-m", "sacrebleu", str(files["ref"]), "-i", str(files["base"]),
                          str(files["good"]), str(files["close"]), "-m", *metrics, "--chrf-word-order", "2",
                          "-w", "6", "-f", "text"] + flag, check=True, capture_output=True, text=True).stdout
    rows, names = [], None
    for line in _ANSI.sub("", out).splitlines():
        if "│" not in line:
            continue
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if cells[0] == "System":
            names = [re.sub(r" \(.*", "", c) for c in cells[1:]]
        elif cells[0]:
            rows.append([cells[0].replace("Baseline: ", ""), {}])
            for name, c in zip(names, cells[1:]):
                rows[-1][1][name] = [float(c.split()[0]), None]
        else:  # the p-value line under a compared system
            for name, c in zip(names, cells[1:]):
                rows[-1][1][name][1] = float(re.search(r"p = ([0-9.]+)", c).group(1))
    return rows


@pytest.mark.parametrize("test,n,metrics", [("bs", 1000, ["bleu", "chrf", "ter"]), ("ar", 1000, ["bleu", "chrf"])])
def test_every_metric_equals_sacrebleu_cli(files, tmp_path, test, n, metrics):
    out_json = tmp_path / "sig.json"
    rc = significance.main([str(files["ref"]), str(files["base"]), str(files["good"]), str(files["close"]),
                            "--metrics", ",".join(metrics), "--bs-samples", "1000", "--ar-trials", str(n),
                            "--json", str(out_json)])
    assert rc == 0
    ours = json.loads(out_json.read_text())  # plain floats: chrF's float32 would not serialise
    cli = _sacrebleu_cli_table(files, test, n, metrics)
    assert [name for name, _ in cli] == [s["name"] for s in ours["systems"]]
    names = {"bleu": "BLEU", "chrf": "chrF2++", "ter": "TER"}
    key = "p_bootstrap" if test == "bs" else "p_ar"
    for (_, theirs), mine in zip(cli, ours["systems"]):
        for m in metrics:
            score, p = theirs[names[m]]
            assert mine["scores"][m]["score"] == pytest.approx(score, abs=1e-6)  # -w 6 digits
            if p is None:
                assert mine["scores"][m].get(key) is None
            else:  # sacreBLEU prints p with 4 decimals
                assert mine["scores"][m][key] == pytest.approx(p, abs=5e-5 + 1e-12)
    for test_ in ("bs", "ar"):
        assert "nw:2" in ours["signature"][test_]["chrF++"]
        assert "tok:13a" in ours["signature"][test_]["BLEU"]


def test_statistics_shared_by_a_tables_tests_change_no_number(files):
    """One table's calls on the same references read each system's statistics once: every
    number (scores, p-values, CIs, signatures, length ratios) equals a call that extracts its own;
    statistics of other references or another tokeniser are refused."""
    from fairseq_attn_reports.significance import paired_tests

    refs = files["ref"].read_text(encoding="utf-8").splitlines()
    hyps = {n: files[n].read_text(encoding="utf-8").splitlines() for n in ("base", "good", "close")}
    shared = M.SentenceStats(refs)
    for order in (("base", "good", "close"), ("good", "base"), ("close", "good", "base")):
        named = [(n, hyps[n]) for n in order]
        got = paired_tests(refs, named, bs_samples=100, ar_trials=100, metrics=["bleu", "chrf", "ter"],
                           stats=shared)
        alone = paired_tests(refs, named, bs_samples=100, ar_trials=100, metrics=["bleu", "chrf", "ter"])
        assert got == alone
        for row, (_, h) in zip(got["systems"], named):  # the length ratio: sacreBLEU's corpus BLEU's
            b = M.make_metric("bleu").corpus_score(h, [refs])
            assert (row["sys_len"], row["ref_len"]) == (b.sys_len, b.ref_len)
    with pytest.raises(ValueError, match="other references or with another tokeniser"):
        paired_tests(refs[:-1], [(n, hyps[n][:-1]) for n in ("base", "good")], stats=shared)
    with pytest.raises(ValueError, match="other references or with another tokeniser"):
        paired_tests(refs, [(n, hyps[n]) for n in ("base", "good")], tokenize="intl", stats=shared)


class _MeanMetric:
    """A segment-mean metric handed to sacreBLEU's own PairedTest: its sufficient
    statistics are (segment score, 1), so sacreBLEU resamples and tests the mean."""

    def __init__(self, table):
        self.table = table  # hypothesis string -> segment score

    def _extract_corpus_statistics(self, hyps, refs):
        return [[self.table[h], 1.0] for h in hyps]

    def _compute_score_from_stats(self, stats):
        from sacrebleu.metrics.base import Score
        return Score("MEAN", float(stats[0]) / float(stats[1]))

    def _aggregate_and_compute(self, stats):
        return self._compute_score_from_stats(np.sum(np.asarray(stats, dtype=np.float64), axis=0))

    def get_signature(self):
        from sacrebleu.metrics.base import Signature
        return Signature({"num_refs": 1})


def test_segment_mean_tests_draw_sacrebleus_resamples():
    """COMET's paired tests must use the very resamples and coin flips of sacreBLEU's
    PairedTest: on scores that sacreBLEU can test itself (a mean metric), every number equals."""
    from sacrebleu.significance import PairedTest

    rng = np.random.default_rng(3)
    n = 50
    base = rng.uniform(0.2, 0.9, n).round(3)
    systems = {"base": base, "better": np.clip(base + rng.normal(0.03, 0.05, n), 0, 1).round(3),
               "noise": np.clip(base + rng.normal(0.0, 0.05, n), 0, 1).round(3)}
    table, named = {}, []
    for name, seg in systems.items():  # distinct strings, one per (system, segment)
        hyps = [f"{name}-{i}" for i in range(n)]
        table.update(zip(hyps, seg.tolist()))
        named.append((name, hyps))
    ours = M.paired_mean_tests([(k, v.tolist()) for k, v in systems.items()], bs_samples=500, ar_trials=700)
    for test, key in (("bs", "p_bootstrap"), ("ar", "p_ar")):
        _, scores = PairedTest(named, {"MEAN": _MeanMetric(table)}, references=None, test_type=test,
                               n_samples=500 if test == "bs" else 700)()
        results = scores["MEAN"]
        for mine, theirs in zip(ours, results):
            torch.testing.assert_close(mine["score"], float(theirs.score), rtol=0, atol=1e-12)
            if theirs.p_value is not None:
                assert mine[key] == theirs.p_value
            if test == "bs":  # sacreBLEU sums its resamples in float32, here float64 (test_float64_statistics)
                torch.testing.assert_close((mine["bs_mean"], mine["bs_ci"]), (float(theirs.mean), float(theirs.ci)),
                                           rtol=1e-6, atol=0)
    assert ours[1]["p_bootstrap"] < 0.05  # the shifted system differs


def test_crlf_and_empty_lines(files, tmp_path, capsys):
    """CRLF endings are line endings (same scores as LF); an empty hypothesis line is an
    empty translation, counted in a note."""
    crlf = tmp_path / "good_crlf.txt"
    crlf.write_bytes(files["good"].read_bytes().replace(b"\n", b"\r\n"))
    lines = files["close"].read_text(encoding="utf-8").split("\n")
    lines[3] = ""
    empty = tmp_path / "close_empty.txt"
    empty.write_text("\n".join(lines), encoding="utf-8")
    outs = []
    for good, close in ((files["good"], files["close"]), (crlf, empty)):
        out = tmp_path / "o.json"
        assert significance.main([str(files["ref"]), str(files["base"]), str(good), str(close), "--ar-trials", "200",
                                  "--bs-samples", "200", "--json", str(out)]) == 0
        outs.append(json.loads(out.read_text())["systems"])
    assert outs[0][1]["scores"] == outs[1][1]["scores"]
    assert outs[1][2]["scores"]["bleu"]["score"] < outs[0][2]["scores"]["bleu"]["score"]
    err = capsys.readouterr().err
    assert f"{empty}: 1 empty line(s) of 80 (line 4)" in err


def _error(capsys, argv):
    rc = significance.main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    return err[-1]


@pytest.mark.parametrize("case", ["count", "dir", "latin1", "tokenize", "metrics", "missing"])
def test_bad_input_is_one_line_naming_it(files, tmp_path, capsys, case):
    ref, base = files["ref"], files["base"]
    other = files["good"]
    extra = []
    if case == "count":
        other = tmp_path / "short.txt"
        other.write_text("\n".join(files["good"].read_text().split("\n")[:50]) + "\n")
        expect = f"{other}: 50 lines but the reference {ref} has 80"
    elif case == "dir":
        other = tmp_path
        expect = f"{tmp_path}: is a directory"
    elif case == "latin1":
        other = tmp_path / "latin1.txt"
        other.write_bytes(files["good"].read_bytes().replace(b"\n", "é\n".encode("latin-1"), 3))
        expect = f"{other}: not UTF-8 (byte 0xe9 at offset"
    elif case == "tokenize":
        extra = ["--tokenize", "foo"]
        expect = "--tokenize foo: unknown sacreBLEU tokeniser; one of "
    elif case == "metrics":
        extra = ["--metrics", "bleu,meteor"]
        expect = "--metrics meteor: one or more of bleu, chrf, ter"
    else:
        other = tmp_path / "nothere.txt"
        expect = f"{other}: no such file"
    line = _error(capsys, [ref, base, other] + extra)
    assert line.startswith("fairseq-attn-significance: error: ")
    assert expect in line
    if case == "latin1":
        assert "line 1)" in line


def test_comet_hint_and_bad_path_first(files, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("COMET_MODEL", raising=False)
    assert significance.main([str(files["ref"]), str(files["base"]), str(files["good"]), "--ar-trials", "100",
                              "--bs-samples", "100"]) == 0
    assert "COMET left out: to add it, pip install '.[comet]' and set COMET_MODEL=" in capsys.readouterr().err
    monkeypatch.setenv("COMET_MODEL", str(tmp_path / "nope.ckpt"))  # checked before the (missing) reference
    line = _error(capsys, [tmp_path / "missing_ref.txt", files["base"], files["good"], "--src", files["ref"]])
    assert f"COMET_MODEL={tmp_path / 'nope.ckpt'}: no such file" in line


def test_marks_follow_each_metrics_direction():
    """TER is better when lower: its mark asks for a lower TER; BLEU/chrF++/COMET higher."""
    sig = {"p_bootstrap": 0.001, "p_ar": 0.002, "same_as_baseline": False}
    assert M.metric_mark("ter", dict(sig, score=20.0), 25.0) == "**"
    assert M.metric_mark("ter", dict(sig, score=30.0), 25.0) == ""
    assert M.metric_mark("chrf", dict(sig, score=30.0), 25.0) == "**"
    assert M.metric_mark("comet", dict(sig, score=0.80, p_ar=0.03), 0.79) == "*"
    assert M.metric_mark("bleu", dict(sig, score=30.0, same_as_baseline=True), 25.0) == ""


class _SentenceChrf:
    """A segment scorer as the registry asks for one: sacreBLEU's sentence-level chrF per line."""

    def score_systems(self, sources, refs, systems):
        from sacrebleu.metrics import CHRF
        chrf = CHRF()
        return [[chrf.sentence_score(h, [r]).score for h, r in zip(hyps, refs)] for hyps in systems]

    def signature(self, bs_samples=None, ar_trials=None, seed=None):
        return f"sentence-chrF|bs:{bs_samples}|ar:{ar_trials}|seed:{seed}"


def test_a_new_metric_is_one_registry_row(files, tmp_path):
    """A corpus metric (chrF without word n-grams, 1 decimal) and a segment metric (mean
    sentence chrF, lower is better for the sake of the test) added as rows: both reach the
    significance table, its legend and the results table, with their labels, digits and
    direction, and their scores equal sacreBLEU's."""
    from sacrebleu.metrics import CHRF

    from fairseq_attn_reports import results
    from fairseq_attn_reports.significance import format_table, legend_lines, paired_tests

    corpus_row = M.Metric("chrf0", "chrF0", digits=1, make=lambda tokenize: CHRF())
    segment_row = M.Metric("sentchrf", "SentChrF", higher_is_better=False, digits=3, level="segment")
    M.register(corpus_row)
    M.register(segment_row)
    try:
        assert "chrf0" in M.metrics_help() and M.parse_metrics("bleu,chrf0") == ["bleu", "chrf0"]
        with pytest.raises(ValueError, match="one or more of bleu, chrf, ter, chrf0"):
            M.parse_metrics("sentchrf")  # a segment metric comes with its scorer, not --metrics
        refs = files["ref"].read_text(encoding="utf-8").splitlines()
        named = [(n, files[n].read_text(encoding="utf-8").splitlines()) for n in ("base", "good")]
        res = paired_tests(refs, named, bs_samples=200, ar_trials=200, metrics=["bleu", "chrf0"],
                           scorers={"sentchrf": _SentenceChrf()})
        assert res["metrics"] == ["bleu", "chrf0", "sentchrf"]
        for row, (_, hyps) in zip(res["systems"], named):
            assert row["scores"]["chrf0"]["score"] == pytest.approx(CHRF().corpus_score(hyps, [refs]).score)
            sent = [CHRF().sentence_score(h, [r]).score for h, r in zip(hyps, refs)]
            assert row["sentchrf_segments"] == sent
            mean = 0.0
            for v in sent:
                mean += v
            assert row["scores"]["sentchrf"]["score"] == pytest.approx(mean / len(sent), abs=1e-12)
        good = res["systems"][1]["scores"]
        # the good system has the higher sentence chrF: on a lower-is-better metric, no mark
        assert good["sentchrf"]["score"] > res["systems"][0]["scores"]["sentchrf"]["score"]
        assert M.metric_mark("sentchrf", good["sentchrf"], res["systems"][0]["scores"]["sentchrf"]["score"]) == ""
        table = format_table(res)
        assert "| chrF0 (mean ± 95% CI) |" in table and "| SentChrF (mean ± 95% CI) |" in table
        assert f" {good['chrf0']['score']:.1f}" in table and f" {good['sentchrf']['score']:.3f}" in table
        legend = "\n".join(legend_lines(res))
        assert "SentChrF: lower is better" in legend and "SentChrF signature (bs): sentence-chrF|bs:200" in legend

        runs = []
        for name, path in (("base", files["base"]), ("good", files["good"])):
            d = tmp_path / name
            d.mkdir()
            (d / "train.log").write_text("")
            (d / "hyp.txt").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
            runs.append((name, str(d)))
        t = results.collect(runs, str(files["ref"]), bs_samples=200, ar_trials=200, metrics=["bleu", "chrf0"],
                            scorers={"sentchrf": _SentenceChrf()})
        assert t["metrics"] == ["bleu", "chrf0", "sentchrf"] and t["rows"][1]["sentchrf_segments"]
        md = results.format_markdown(t)
        assert "| chrF0 | Δ | SentChrF | Δ |" in md.splitlines()[0]
        row = t["rows"][1]
        assert (f"| {row['scores']['chrf0']['score']:.1f}{row['marks']['chrf0']} | {row['deltas']['chrf0']:+.1f} |"
                in md.splitlines()[3])
        assert f"| {row['scores']['sentchrf']['score']:.3f} | {row['deltas']['sentchrf']:+.3f} |" in md.splitlines()[3]
    finally:
        M.METRICS.pop("chrf0")
        M.METRICS.pop("sentchrf")


def test_registry_rows_are_checked():
    with pytest.raises(ValueError, match="registered twice"):
        M.register(M.Metric("bleu", "BLEU", make=lambda tokenize: None))
    with pytest.raises(ValueError, match="a corpus metric needs make"):
        M.register(M.Metric("nothing", "Nothing"))
    assert "nothing" not in M.METRICS


def test_scoring_step_imports_neither_torch_nor_fairseq():
    """The recipes' scoring step (and the run record, metrics, readers it uses) starts without torch."""
    code = ("import sys; import fairseq_attn_recipes.scoring, fairseq_attn_records.run_record; "
            "print(sorted(m for m in ('torch', 'fairseq', 'fairseq_attn_plugins') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def _plain_sums(stats, rows):
    """Each row's per-sentence statistics summed with Python numbers, as floats (exact: counts)."""
    return [[float(sum(stats[i][j] for i in row)) for j in range(len(stats[0]))] for row in rows]


def _plain_ci(scores):
    s = sorted(scores)
    lower = len(s) // 40
    return math.fsum(s) / len(s), 0.5 * (s[len(s) - lower - 1] - s[lower])


@pytest.mark.parametrize("key", ["bleu", "chrf"])
def test_float64_statistics_to_the_last_bit(files, key):
    """The bootstrap and approximate-randomisation numbers of the tables are sacreBLEU's tests with
    every resample summed in float64 and scored from Python floats, whatever numpy promotes: equal, to
    the last bit, to a plain reference (Python sums of sacreBLEU's draws for the seed, the metric's own
    formula). sacreBLEU's float32 sums give numbers that differ between numpy 1 and numpy 2."""
    refs, base, sys_ = (files[n].read_text(encoding="utf-8").splitlines()[:30] for n in ("ref", "base", "good"))
    bs, ar = 120, 150
    res = M.sacrebleu_paired_tests(refs, [("base", base), ("good", sys_)], [key], bs_samples=bs, ar_trials=ar)
    metric = M.make_metric(key)
    score = lambda summed: float(metric._compute_score_from_stats(summed).score)
    st_b, st_s = (metric._extract_corpus_statistics(h, [refs]) for h in (base, sys_))
    n = len(refs)
    idxs = np.random.default_rng(12345).choice(n, size=(bs, n), replace=True).tolist()  # sacreBLEU's draw
    coins = np.random.default_rng(12345).integers(2, size=(ar, n), dtype=bool).tolist()
    b_bs = [score(s) for s in _plain_sums(st_b, idxs)]
    s_bs = [score(s) for s in _plain_sums(st_s, idxs)]
    s_real, b_real = score(_plain_sums(st_s, [range(n)])[0]), score(_plain_sums(st_b, [range(n)])[0])
    diff = abs(b_real - s_real)
    d = [abs(x - y) for x, y in zip(s_bs, b_bs)]
    mean_d = math.fsum(d) / len(d)
    p_bs = (sum(1 for v in d if v - mean_d > diff) + 1) / (bs + 1)
    ar_d = []
    for c in coins:
        a = [st_b[i] if c[i] else st_s[i] for i in range(n)]
        b = [st_s[i] if c[i] else st_b[i] for i in range(n)]
        ar_d.append(abs(score(_plain_sums(a, [range(n)])[0]) - score(_plain_sums(b, [range(n)])[0])))
    p_ar = (sum(1 for v in ar_d if v > diff) + 1) / (ar + 1)
    b_cell, s_cell = (row["scores"][key] for row in res["systems"])
    assert (b_cell["bs_mean"], b_cell["bs_ci"]) == _plain_ci(b_bs)  # the baseline's own draw: the same seed
    assert (s_cell["bs_mean"], s_cell["bs_ci"]) == _plain_ci(s_bs)
    assert (s_cell["p_bootstrap"], s_cell["p_ar"]) == (p_bs, p_ar)
    assert s_cell["score"] == s_real and 0.0 < p_bs < 1.0
