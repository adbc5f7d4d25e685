"""Scores by source length: buckets as a plain loop puts them, every bucket's scores and
p-values equal to sacreBLEU run on that bucket's lines, marks only where tested."""

import json
import math
import random

import pytest
import sacrebleu
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from fairseq_attn_reports.cli import results as results_cli
from fairseq_attn_reports.cli import significance
from fairseq_attn_reports import by_length as BL
from fairseq_attn_records.toy_corpus import make_corpus

from test_significance import _noisy, _runs_with

BS, AR = 100, 200
# toy source lengths run 3..14 words: 1-2 is empty, > 10 holds 16 sentences, the others >= 30
EDGES = "2,5,8,10"


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bylen")
    pairs = make_corpus(200, seed=3)
    refs = [t for _, t in pairs]
    paths = {"src": _write(d / "src.txt", [s for s, _ in pairs]), "ref": _write(d / "ref.txt", refs)}
    for name, lines in (("base", _noisy(refs, 0.35, 1)), ("good", _noisy(refs, 0.15, 2))):
        paths[name] = _write(d / f"{name}.txt", lines)
    return paths


@pytest.fixture(scope="module")
def sig_json(files, tmp_path_factory):
    out = tmp_path_factory.mktemp("bylen_out") / "sig.json"
    rc = significance.main([str(files["ref"]), str(files["base"]), str(files["good"]), "--names", "base", "good",
                            "--src", str(files["src"]), "--by-length", EDGES, "--train-max-len", "9",
                            "--bs-samples", str(BS), "--ar-trials", str(AR), "--json", str(out)])
    assert rc == 0
    return json.loads(out.read_text())


def _read(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def _plain_bucket(length, edges):
    for i, e in enumerate(edges):
        if length <= e:
            return i
    return len(edges)


# ---- (a) buckets ----------------------------------------------------------------------------

def test_bucket_assignment_equals_a_plain_loop():
    rng = random.Random(0)
    for _ in range(50):
        edges = sorted(rng.sample(range(1, 60), rng.randint(1, 6)))
        lengths = [rng.randint(0, 70) for _ in range(200)] + edges + [e + 1 for e in edges] + [0]
        assert BL.assign_buckets(lengths, edges) == [_plain_bucket(n, edges) for n in lengths]
    buckets = BL.make_buckets([10, 20, 21])
    assert [(b.lo, b.hi, b.label) for b in buckets] == [(1, 10, "1–10"), (11, 20, "11–20"), (21, 21, "21"),
                                                        (22, None, "> 21")]
    assert BL.sentence_length("  a  b\tc ") == 3 and BL.sentence_length("") == 0


def test_auto_edges_are_nearest_rank_quantiles():
    rng = random.Random(1)
    lengths = [rng.randint(1, 80) for _ in range(997)]
    s = sorted(lengths)
    plain = []
    for i in range(1, 5):
        e = s[math.ceil(i * len(s) / 5) - 1]
        if e not in plain and 0 < e < max(s):
            plain.append(e)
    edges = BL.auto_edges(lengths)
    assert edges == plain and len(edges) == 4
    sizes = [BL.assign_buckets(lengths, edges).count(b) for b in range(5)]
    assert all(abs(n - len(lengths) / 5) < 0.05 * len(lengths) for n in sizes), sizes
    assert BL.auto_edges([7] * 40) == [7]  # one length: one bucket holding all, one empty
    assert BL.auto_edges([0, 0, 0]) == [1]  # only empty lines
    assert BL.auto_edges([1, 1, 1, 1, 2, 9]) == [1, 2]  # edges deduplicated, the longest dropped
    # the training length is an edge too (no bucket straddles it), unless it is >= the longest
    assert BL.auto_edges(lengths, train_max_len=edges[0] + 1) == sorted(set(edges) | {edges[0] + 1})
    assert BL.auto_edges(lengths, train_max_len=max(lengths)) == edges


def test_training_relation():
    n = 20
    rel = [BL.training_relation(b, n) for b in BL.make_buckets([10, 20, 30])]
    assert rel == [BL.WITHIN, BL.WITHIN, BL.BEYOND, BL.BEYOND]
    rel = [BL.training_relation(b, 15) for b in BL.make_buckets([10, 20])]
    assert rel == [BL.WITHIN, BL.PARTLY_BEYOND, BL.BEYOND]
    assert BL.training_relation(BL.Bucket(1, None), 5) == BL.PARTLY_BEYOND
    assert BL.training_relation(BL.Bucket(1, 5), None) is None


# ---- (b, c) each bucket equals sacreBLEU on that bucket's lines --------------------------------

def _bucket_files(files, tmp_path, edges):
    """Each bucket's ref / base / good lines written to files, with a plain loop over the source."""
    src = _read(files["src"])
    per = {}
    for i, line in enumerate(src):
        per.setdefault(_plain_bucket(len(line.split()), edges), []).append(i)
    out = {}
    for b, idx in per.items():
        out[b] = {}
        for name in ("ref", "base", "good"):
            lines = _read(files[name])
            out[b][name] = _read(_write(tmp_path / f"{b}.{name}", [lines[i] for i in idx]))
    return out


def test_bucket_scores_and_p_values_equal_sacrebleu(files, sig_json, tmp_path):
    data = sig_json["by_length"]
    edges = [int(e) for e in EDGES.split(",")]
    assert data["edges"] == edges
    subsets = _bucket_files(files, tmp_path, edges)
    assert [b["n"] for b in data["buckets"]] == [len(subsets.get(i, {}).get("ref", [])) for i in range(5)]
    checked_p = 0
    for i, bucket in enumerate(data["buckets"]):
        if not bucket["n"]:
            assert bucket["systems"] == []
            continue
        sub = subsets[i]
        for row, name in zip(bucket["systems"], ("base", "good")):
            bleu = sacrebleu.corpus_bleu(sub[name], [sub["ref"]]).score
            chrf = sacrebleu.corpus_chrf(sub[name], [sub["ref"]], word_order=2).score
            assert row["scores"]["bleu"]["score"] == pytest.approx(bleu, abs=1e-9)
            assert row["scores"]["chrf"]["score"] == pytest.approx(chrf, abs=1e-9)
        base, good = bucket["systems"]
        assert good["deltas"]["bleu"] == pytest.approx(good["scores"]["bleu"]["score"] - base["scores"]["bleu"]["score"])
        named = [("base", sub["base"]), ("good", sub["good"])]
        for test, n, key in (("bs", BS, "p_bootstrap"), ("ar", AR, "p_ar")):
            _, scores = PairedTest(named, {"BLEU": BLEU(), "chrF": CHRF(word_order=2)}, references=[sub["ref"]],
                                   test_type=test, n_samples=n, n_jobs=1)()
            for metric, name in (("bleu", "BLEU"), ("chrf", "chrF2++")):
                theirs_base, theirs = scores[name]
                if test == "bs":  # the intervals of the plot, the baseline's included (sacreBLEU sums its
                    # resamples in float32, the package in float64: test_metrics.test_float64_statistics...)
                    for row, res in ((base, theirs_base), (good, theirs)):
                        assert row["scores"][metric]["bs_mean"] == pytest.approx(float(res.mean), rel=1e-6)
                        assert row["scores"][metric]["bs_ci"] == pytest.approx(float(res.ci), rel=1e-5)
                if bucket["tested"]:
                    assert good["scores"][metric][key] == pytest.approx(theirs.p_value, abs=1e-12)
                    checked_p += 1
                else:
                    assert good["scores"][metric][key] is None
    assert checked_p == 3 * 2 * 2  # three tested buckets, two metrics, two tests


# ---- (d) marks only where tested, n = 0 without scores ------------------------------------------

def _row(out, label):
    return next(line for line in out.splitlines() if line.startswith(f"| {label} |"))


def test_marks_only_on_tested_buckets(files, sig_json, capsys):
    buckets = {b["label"]: b for b in sig_json["by_length"]["buckets"]}
    assert buckets["1–2"]["n"] == 0 and buckets["> 10"]["n"] == 16 and buckets["3–5"]["n"] >= 30
    assert buckets["3–5"]["systems"][1]["marks"]["bleu"] == "**"  # much better, enough sentences
    small = buckets["> 10"]["systems"][1]
    assert not buckets["> 10"]["tested"] and small["marks"] == {"bleu": "", "chrf": ""}
    assert small["deltas"]["bleu"] > 10 and small["deltas"]["chrf"] > 5  # clearly better, yet not tested
    assert sig_json["by_length"]["min_sentences_for_test"] == BL.MIN_SENTENCES_FOR_TEST == 30
    rc = significance.main([str(files["ref"]), str(files["base"]), str(files["good"]), "--names", "base", "good",
                            "--src", str(files["src"]), "--by-length", EDGES, "--bs-samples", str(BS),
                            "--ar-trials", str(AR)])
    out = capsys.readouterr().out
    assert rc == 0
    assert _row(out, "1–2") == "| 1–2 | 0 |" + " - |" * 6 + " - |" * 2  # scores, deltas, length ratios
    assert "*" not in _row(out, "> 10")
    assert "**" in _row(out, "3–5")
    assert "n < 30: no significance mark" in out
    main_table = out.split("### Scores by source length")[0]
    assert "| good | 71.71** (" in main_table  # the main table is still first and unchanged


def test_small_bucket_unmarked_though_sacrebleu_finds_it_significant(files):
    """The reference itself as a system: on the 16 sentences > 10 words sacreBLEU's test is
    significant, and the bucket still gets no mark (n < 30); on 40 sentences it is marked."""
    refs, src, base = _read(files["ref"]), _read(files["src"]), _read(files["base"])
    data = BL.scores_by_length(refs, [("base", base), ("perfect", refs)], src, [8, 10], bs_samples=BS,
                               ar_trials=AR)
    small, large = data["buckets"][2], data["buckets"][1]
    assert (small["n"], large["n"]) == (16, 40)
    idx = [i for i, line in enumerate(src) if len(line.split()) > 10]
    for test in ("bs", "ar"):
        _, scores = PairedTest([("base", [base[i] for i in idx]), ("perfect", [refs[i] for i in idx])],
                               {"BLEU": BLEU()}, references=[[refs[i] for i in idx]], test_type=test,
                               n_samples=BS if test == "bs" else AR, n_jobs=1)()
        assert scores["BLEU"][1].p_value < 0.05
    assert small["systems"][1]["marks"]["bleu"] == "" and small["systems"][1]["scores"]["bleu"]["p_ar"] is None
    assert large["systems"][1]["marks"]["bleu"] == "**"


def test_worse_system_gets_no_mark_in_any_bucket(files, tmp_path):
    out = tmp_path / "worse.json"
    assert significance.main([str(files["ref"]), str(files["good"]), str(files["base"]), "--src", str(files["src"]),
                              "--by-length", "auto", "--bs-samples", str(BS), "--ar-trials", str(AR),
                              "--json", str(out)]) == 0
    data = json.loads(out.read_text())["by_length"]
    assert data["edges_spec"] == "auto" and data["auto_rule"]
    assert len(data["buckets"]) == len(data["edges"]) + 1 >= 4
    for b in data["buckets"]:
        worse = b["systems"][1]
        assert worse["deltas"]["bleu"] < 0 and worse["marks"] == {"bleu": "", "chrf": ""}


# ---- (e) JSON layout and plot --------------------------------------------------------------------

def test_json_layout(sig_json):
    data = sig_json["by_length"]
    assert set(data) >= {"length", "edges", "edges_spec", "min_sentences_for_test", "train_max_len", "metrics",
                         "labels", "baseline", "system_names", "bs_samples", "ar_trials", "buckets"}
    assert data["train_max_len"] == 9 and data["baseline"] == "base" and data["system_names"] == ["base", "good"]
    assert "whitespace-separated words" in data["length"]
    assert [(b["lo"], b["hi"], b["label"], b["training"]) for b in data["buckets"]] == [
        (1, 2, "1–2", "within"), (3, 5, "3–5", "within"), (6, 8, "6–8", "within"),
        (9, 10, "9–10", "partly beyond"), (11, None, "> 10", "beyond")]
    for b in data["buckets"]:
        for s in b["systems"]:
            assert set(s) == {"name", "scores", "deltas", "marks", "length_ratio"}
            assert set(s["scores"]) == {"bleu", "chrf"}


def test_plot_writes_a_png(files, tmp_path, capsys):
    import matplotlib.image

    png = tmp_path / "by_length.png"
    assert significance.main([str(files["ref"]), str(files["base"]), str(files["good"]), "--src", str(files["src"]),
                              "--by-length", "4,7", "--train-max-len", "5", "--plot", str(png),
                              "--bs-samples", str(BS), "--ar-trials", str(AR)]) == 0
    img = matplotlib.image.imread(str(png))
    assert img.shape[0] > 100 and img.shape[1] > 100
    assert len({tuple(px) for px in img.reshape(-1, img.shape[-1])[::7].tolist()}) > 5
    assert not list(tmp_path.glob("*.tmp*"))
    out = capsys.readouterr().out
    assert "| 5–7 | " in out and "| partly beyond |" in out


# ---- (f) fairseq-attn-results on run directories -----------------------------------------------------

def _run_dirs(tmp_path, hyps):
    return [d for _, d in _runs_with(tmp_path, hyps)]


def test_results_command_by_length(files, sig_json, tmp_path, capsys):
    runs = _run_dirs(tmp_path, [("base", files["base"]), ("good", files["good"])])
    out_json, md, png = tmp_path / "table.json", tmp_path / "table.md", tmp_path / "len.png"
    rc = results_cli.main(["--ref", str(files["ref"]), "--src", str(files["src"]), "--by-length", EDGES,
                           "--train-max-len", "9", "--bs-samples", str(BS), "--ar-trials", str(AR),
                           "--json", str(out_json), "--md", str(md), "--plot", str(png)] + runs)
    assert rc == 0
    table = json.loads(out_json.read_text())
    assert table["by_length"]["buckets"] == sig_json["by_length"]["buckets"]  # the same numbers as -significance
    text = md.read_text()
    assert text.index("| # | System |") < text.index("### Scores by source length (words)")
    assert "| 9–10 | 40 | partly beyond |" in text and "| > 10 | 16 | beyond |" in text and png.stat().st_size > 0


def test_results_refuses_by_length_with_seeds(files, tmp_path, capsys):
    runs = _run_dirs(tmp_path, [("base", files["base"]), ("x_seed1", files["good"]), ("x_seed2", files["good"])])
    out_json = tmp_path / "t.json"
    rc = results_cli.main(["--ref", str(files["ref"]), "--src", str(files["src"]), "--by-length", "auto",
                           "--json", str(out_json)] + runs)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and not out_json.exists()
    assert err[0] == "fairseq-attn-results: error: --by-length needs one run per system (several seeds given: x x2)"


# ---- bad input: one line, exit 1, nothing written ----------------------------------------------------

BAD = [
    (["--by-length", "auto"], "--by-length needs --src"),
    (["--src", "SRC", "--by-length", "20,10"], "--by-length 20,10: edges must be positive and strictly increasing"),
    (["--src", "SRC", "--by-length", "10,10"], "--by-length 10,10: edges must be positive and strictly increasing"),
    (["--src", "SRC", "--by-length", "0,10"], "--by-length 0,10: edges must be positive"),
    (["--src", "SRC", "--by-length", "a,b"], "--by-length 'a,b': 'auto' or comma-separated increasing positive"),
    (["--src", "SRC", "--by-length", "10.5"], "--by-length '10.5': 'auto' or comma-separated"),
    (["--src", "SRC", "--by-length", "-5"], "--by-length '-5': 'auto' or comma-separated"),
    (["--src", "SRC", "--by-length", ""], "--by-length '': 'auto' or comma-separated"),
    (["--src", "SRC", "--plot", "PNG"], "--plot needs --by-length"),
    (["--src", "SRC", "--by-length", "auto", "--train-max-len", "0"], "--train-max-len 0: a positive integer"),
    (["--src", "SRC", "--by-length", "auto", "--train-max-len", "-3"], "--train-max-len -3: a positive integer"),
    (["--src", "SRC", "--by-length", "auto", "--train-max-len", "x"], "--train-max-len x: a positive integer"),
    (["--src", "SHORT", "--by-length", "auto"], "SHORT: 150 lines but the reference REF has 200 (one source sentence per"),
]


@pytest.mark.parametrize("command", ["significance", "results"])
@pytest.mark.parametrize("flags,expect", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_is_one_line(files, tmp_path, capsys, command, flags, expect):
    short = _write(tmp_path / "short.src", _read(files["src"])[:150])
    out_json, png = tmp_path / "out.json", tmp_path / "out.png"
    subst = {"SRC": str(files["src"]), "SHORT": str(short), "PNG": str(png)}
    flags = [subst.get(f, f) for f in flags] + ["--json", str(out_json), "--bs-samples", "50", "--ar-trials", "50"]
    if command == "significance":
        rc = significance.main([str(files["ref"]), str(files["base"]), str(files["good"])] + flags)
    else:
        runs = _run_dirs(tmp_path, [("base", files["base"]), ("good", files["good"])])
        rc = results_cli.main(["--ref", str(files["ref"])] + flags + runs)
    err = capsys.readouterr().err.strip().splitlines()
    err = [line for line in err if "COMET left out" not in line]
    assert rc == 1 and len(err) == 1, err
    prog = "fairseq-attn-significance" if command == "significance" else "fairseq-attn-results"
    assert err[0].startswith(f"{prog}: error: ")
    expect = expect.replace("SHORT", str(short)).replace("REF", str(files["ref"]))
    assert expect in err[0]
    assert not out_json.exists() and not png.exists()


# ---- (f) length ratio, reference and output length ------------------------------------------------

def _plain_ratio(hyps, refs):
    b = sacrebleu.corpus_bleu(hyps, [refs])
    return b.sys_len / b.ref_len


def test_length_ratio_of_every_bucket_and_system_is_sacrebleus(files, sig_json):
    refs, src = _read(files["ref"]), _read(files["src"])
    hyps = {"base": _read(files["base"]), "good": _read(files["good"])}
    edges = [int(e) for e in EDGES.split(",")]
    for b_i, b in enumerate(sig_json["by_length"]["buckets"]):
        idx = [i for i, s in enumerate(src) if _plain_bucket(len(s.split()), edges) == b_i]
        for s in b["systems"]:
            want = _plain_ratio([hyps[s["name"]][i] for i in idx], [refs[i] for i in idx])
            assert math.isclose(s["length_ratio"], want, rel_tol=0, abs_tol=1e-12)
    # the main table too
    for row in sig_json["systems"]:
        assert math.isclose(row["length_ratio"], _plain_ratio(hyps[row["name"]], refs), abs_tol=1e-12)


def test_by_reference_length_buckets_every_system_on_the_same_sentences(files, tmp_path):
    out = tmp_path / "ref.json"
    rc = significance.main([str(files["ref"]), str(files["base"]), str(files["good"]), "--names", "base", "good",
                            "--by-length", EDGES, "--by-length-of", "ref", "--bs-samples", str(BS),
                            "--ar-trials", str(AR), "--json", str(out)])  # no --src needed
    assert rc == 0
    data = json.loads(out.read_text())["by_length"]
    assert data["length_of"] == "ref" and data["paired"] and "reference line" in data["length"]
    refs, base, good = _read(files["ref"]), _read(files["base"]), _read(files["good"])
    edges = [int(e) for e in EDGES.split(",")]
    for b_i, b in enumerate(data["buckets"]):
        idx = [i for i, r in enumerate(refs) if _plain_bucket(len(r.split()), edges) == b_i]
        assert b["n"] == len(idx)
        if not idx:
            continue
        r, h0, h1 = [refs[i] for i in idx], [base[i] for i in idx], [good[i] for i in idx]
        _, scores = PairedTest([("base", h0), ("good", h1)], {"BLEU": BLEU()}, references=[r], test_type="ar",
                               n_samples=AR, n_jobs=1)()
        assert math.isclose(b["systems"][1]["scores"]["bleu"]["score"], sacrebleu.corpus_bleu(h1, [r]).score,
                            abs_tol=1e-9)
        if b["tested"]:
            assert math.isclose(b["systems"][1]["scores"]["bleu"]["p_ar"], scores["BLEU"][1].p_value, abs_tol=1e-12)


def test_by_output_length_buckets_each_system_on_its_own_outputs_without_paired_test(files, tmp_path, capsys):
    import numpy as np
    out = tmp_path / "hyp.json"
    rc = significance.main([str(files["ref"]), str(files["base"]), str(files["good"]), "--names", "base", "good",
                            "--by-length", EDGES, "--by-length-of", "hyp", "--bs-samples", str(BS),
                            "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    data = json.loads(out.read_text())["by_length"]
    assert data["length_of"] == "hyp" and not data["paired"]
    assert "### Scores by output length" in printed and "No paired test: by output length" in printed
    refs = _read(files["ref"])
    hyps = {"base": _read(files["base"]), "good": _read(files["good"])}
    edges = [int(e) for e in EDGES.split(",")]
    seed = 12345
    for b_i, b in enumerate(data["buckets"]):
        for s in b["systems"]:
            h = hyps[s["name"]]
            idx = [i for i, line in enumerate(h) if _plain_bucket(len(line.split()), edges) == b_i]
            assert s["n"] == len(idx) and s["marks"] == {"bleu": "", "chrf": ""}
            assert all(v is None for v in s["deltas"].values())
            if not idx:
                assert s["scores"]["bleu"] is None
                continue
            r, hh = [refs[i] for i in idx], [h[i] for i in idx]
            assert "p_bootstrap" not in s["scores"]["bleu"] and "p_ar" not in s["scores"]["bleu"]
            assert math.isclose(s["scores"]["bleu"]["score"], sacrebleu.corpus_bleu(hh, [r]).score, abs_tol=1e-9)
            assert math.isclose(s["scores"]["chrf"]["score"],
                                sacrebleu.corpus_chrf(hh, [r], word_order=2).score, abs_tol=1e-9)
            assert math.isclose(s["length_ratio"], _plain_ratio(hh, r), abs_tol=1e-12)
            # the interval: sacreBLEU's own single-system bootstrap draw, summed in float64, with a plain loop
            bleu = BLEU()
            stats = np.array(bleu._extract_corpus_statistics(hh, [r]), dtype="float64")
            draw = np.random.default_rng(seed).choice(len(hh), size=(BS, len(hh)), replace=True)
            res = sorted(bleu._compute_score_from_stats(stats[d].sum(0)).score for d in draw)
            lo = BS // 40
            assert math.isclose(s["scores"]["bleu"]["bs_mean"], float(np.mean(res)), rel_tol=1e-9)
            assert math.isclose(s["scores"]["bleu"]["bs_ci"], 0.5 * (res[BS - lo - 1] - res[lo]), rel_tol=1e-9)


@pytest.mark.parametrize("extra, message", [
    (["--by-length", EDGES, "--by-length-of", "tgt"], "--by-length-of tgt: give src (source length), ref"),
    (["--by-length-of", "ref"], "--by-length-of needs --by-length"),
    (["--by-length", EDGES, "--by-length-of", "hyp", "--ar-trials", "100"], "--ar-trials with --by-length-of hyp"),
])
def test_by_length_of_refusals(files, tmp_path, capsys, extra, message):
    out = tmp_path / "x.json"
    for main, args in ((significance.main, [str(files["ref"]), str(files["base"]), str(files["good"])]),
                       (results_cli.main, ["--ref", str(files["ref"]), str(tmp_path / "a"), str(tmp_path / "b")])):
        rc = main(args + ["--src", str(files["src"]), "--json", str(out)] + extra)
        err = capsys.readouterr().err
        assert rc == 1 and message in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()
