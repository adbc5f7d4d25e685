"""fairseq-attn-significance must give exactly sacreBLEU's CLI numbers."""

import json
import random
import subprocess
import sys

import pytest

from fairseq_attn_reports.cli import significance
from fairseq_attn_reports.significance import significance_mark, system_mark
from fairseq_attn_records.toy_corpus import make_corpus


def _noisy(lines, rate, seed):
    rng = random.Random(seed)
    out = []
    for line in lines:
        words = line.split()
        words = [w if rng.random() > rate else rng.choice(words) for w in words]
        out.append(" ".join(words))
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("sig")
    refs = [t for _, t in make_corpus(120, seed=3)]
    paths = {}
    for name, lines in (("ref", refs), ("base", _noisy(refs, 0.35, 1)),
                        ("good", _noisy(refs, 0.15, 2)), ("same", _noisy(refs, 0.34, 4))):
        paths[name] = d / f"{name}.txt"
        paths[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def _sacrebleu_cli(files, test, n):
    flag = ["--paired-bs", "--paired-bs-n", str(n)] if test == "bs" else ["--paired-ar", "--paired-ar-n", str(n)]
    out = subprocess.run([sys.executable, "-m", "sacrebleu", str(files["ref"]), "-i", str(files["base"]),
                          str(files["good"]), str(files["same"]), "-m", "bleu", "-f", "json"] + flag,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


@pytest.mark.parametrize("test,key", [("bs", "p_bootstrap"), ("ar", "p_ar")])
def test_matches_sacrebleu_cli(files, tmp_path, test, key):
    out_json = tmp_path / "sig.json"
    rc = significance.main([str(files["ref"]), str(files["base"]), str(files["good"]), str(files["same"]),
                            "--ar-trials", "2000", "--json", str(out_json)])
    assert rc == 0
    ours = json.loads(out_json.read_text())["systems"]
    cli = _sacrebleu_cli(files, test, 1000 if test == "bs" else 2000)
    assert [r["system"].replace("Baseline: ", "") for r in cli] == [r["name"] for r in ours]
    for mine, theirs in zip(ours, cli):
        assert mine["bleu"] == pytest.approx(theirs["BLEU"]["score"], abs=1e-9)
        if theirs["BLEU"]["p_value"] is None:
            assert mine.get(key) is None
        else:
            assert mine[key] == pytest.approx(theirs["BLEU"]["p_value"], abs=1e-12)
        if test == "bs":
            assert mine["bs_mean"] == pytest.approx(theirs["BLEU"]["mean"], abs=1e-9)
            assert mine["bs_ci"] == pytest.approx(theirs["BLEU"]["ci"], abs=1e-9)
    # sanity on the data itself: the much better system is significant, the near-copy is not
    assert ours[1][key] < 0.01 and ours[1]["bleu"] > ours[0]["bleu"]
    assert ours[2][key] > 0.05


def test_marks():
    assert significance_mark([0.001, 0.005]) == "**"
    assert significance_mark([0.001, 0.03]) == "*"
    assert significance_mark([0.2, 0.001]) == ""
    assert significance_mark([None]) == ""


def test_bad_input(files, tmp_path, capsys):
    out_json = tmp_path / "sig.json"
    rc = significance.main([str(files["ref"]), str(files["base"]), str(tmp_path / "missing.txt"),
                            "--json", str(out_json)])
    assert rc == 1 and "missing.txt" in capsys.readouterr().err
    assert not out_json.exists()
    short = tmp_path / "short.txt"
    short.write_text("a b c\n")
    rc = significance.main([str(files["ref"]), str(files["base"]), str(short), "--json", str(out_json)])
    assert rc == 1 and "lines" in capsys.readouterr().err and not out_json.exists()


# ---- no mark for equal or worse systems, one-line errors ----------
def _table_row(out, name):
    return next(line for line in out.splitlines() if line.startswith(f"| {name}"))


def test_identical_system_gets_no_mark_and_p_one(files, capsys):
    """sacreBLEU prints p = 1/(n+1) for a copy of the baseline; we print 1.0 and no mark."""
    rc = significance.main([str(files["ref"]), str(files["base"]), str(files["base"]),
                            "--names", "base", "copy", "--ar-trials", "200", "--bs-samples", "200"])
    out = capsys.readouterr().out
    assert rc == 0
    row = _table_row(out, "copy")
    assert "*" not in row, row  # no mark on any metric
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == cells[4] == "1.0000 / 1.0000", row  # BLEU's and chrF++'s p-values


def test_worse_system_gets_no_mark(files, capsys):
    # 'good' as the baseline: 'base' is much worse (p < 0.01 in both tests) yet unmarked
    rc = significance.main([str(files["ref"]), str(files["good"]), str(files["base"]),
                            "--names", "good", "worse", "--ar-trials", "500", "--bs-samples", "500"])
    out = capsys.readouterr().out
    assert rc == 0
    row = _table_row(out, "worse")
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "worse" and "*" not in row
    p_bs, p_ar = (float(x) for x in cells[2].split(" / "))
    assert p_bs < 0.01 and p_ar < 0.01  # significantly different...
    # ...and the better direction still gets its mark, on each metric
    rc = significance.main([str(files["ref"]), str(files["base"]), str(files["good"]),
                            "--names", "base", "better", "--ar-trials", "500", "--bs-samples", "500"])
    cells = [c.strip() for c in _table_row(capsys.readouterr().out, "better").strip("|").split("|")]
    assert cells[1].split(" (")[0].endswith("**") and cells[3].split(" (")[0].endswith("**")


def test_system_mark_rule():
    better = {"bleu": 30.0, "p_bootstrap": 0.001, "p_ar": 0.002, "same_as_baseline": False}
    assert system_mark(better, 29.0) == "**"
    assert system_mark(better, 30.0) == ""  # equal BLEU: not better
    assert system_mark(better, 31.0) == ""  # worse
    assert system_mark({**better, "same_as_baseline": True}, 29.0) == ""
    assert system_mark({"bleu": 29.0}, 29.0) == ""  # the baseline row


def _runs_with(tmp_path, hyps):
    runs = []
    for name, path in hyps:
        d = tmp_path / name
        d.mkdir()
        (d / "train.log").write_text("")
        (d / "hyp.txt").write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        runs.append((name, str(d)))
    return runs


def test_results_table_shares_the_mark_rule(files, tmp_path):
    from fairseq_attn_reports import results

    runs = _runs_with(tmp_path, [("good", files["good"]), ("copy", files["good"]), ("worse", files["base"])])
    table = results.collect(runs, str(files["ref"]), bs_samples=300, ar_trials=300)
    marks = {r["system"]: r["mark"] for r in table["rows"]}
    assert marks == {"good": "", "copy": "", "worse": ""}
    worse = next(r for r in table["rows"] if r["system"] == "worse")
    assert worse["p_bootstrap"] < 0.01 and worse["delta"] < 0


@pytest.mark.parametrize("tool", ["significance", "results"])
def test_bad_arguments_give_one_line_errors(files, tmp_path, capsys, tool):
    from fairseq_attn_reports.cli import results

    empty = tmp_path / "empty.txt"
    empty.write_text("")
    if tool == "significance":
        main, base = significance.main, [str(files["ref"]), str(files["base"]), str(files["good"])]
        with_empty = [str(files["ref"]), str(files["base"]), str(empty)]
    else:
        runs = _runs_with(tmp_path, [("base", files["base"]), ("good", files["good"])])
        main, base = results.main, ["--ref", str(files["ref"]), runs[0][1], runs[1][1]]
        with_empty = ["--ref", str(empty), runs[0][1], runs[1][1]]
    cases = [
        (with_empty, "empty"),
        (base + ["--json", str(tmp_path / "no" / "such" / "dir.json")], "does not exist"),
        (base + ["--bs-samples", "0"], "--bs-samples"),
        (base + ["--ar-trials", "-3"], "--ar-trials"),
    ]
    for argv, words in cases:
        rc = main(argv)
        err = capsys.readouterr().err.strip()
        assert rc == 1, argv
        assert len(err.splitlines()) == 1 and words in err and "Traceback" not in err, err
    assert not (tmp_path / "no").exists()
