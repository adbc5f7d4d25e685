"""fairseq-attn-significance must give exactly sacreBLEU's CLI numbers."""

import json
import random
import subprocess
import sys

import pytest

from fairseq_attn_plugins.cli import significance
from fairseq_attn_plugins.toy_corpus import make_corpus


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
    assert significance.significance_mark([0.001, 0.005]) == "**"
    assert significance.significance_mark([0.001, 0.03]) == "*"
    assert significance.significance_mark([0.2, 0.001]) == ""
    assert significance.significance_mark([None]) == ""


def test_bad_input(files, tmp_path, capsys):
    out_json = tmp_path / "sig.json"
    rc = significance.main([str(files["ref"]), str(files["base"]), str(tmp_path / "missing.txt"),
                            "--json", str(out_json)])
    assert rc == 2 and "missing.txt" in capsys.readouterr().err
    assert not out_json.exists()
    short = tmp_path / "short.txt"
    short.write_text("a b c\n")
    rc = significance.main([str(files["ref"]), str(files["base"]), str(short), "--json", str(out_json)])
    assert rc == 2 and "lines" in capsys.readouterr().err and not out_json.exists()
