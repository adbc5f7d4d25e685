"""The per-k tables of the long-input study over seeds: the segment-by-segment rows against
sacreBLEU on the k = 1 outputs grouped plainly, the mean ± sample std over three seeds and the
all-seeds marks by hand, and the difference between two training conditions."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import sacrebleu
import torch

from fairseq_attn_reports.cli import by_concat as by_concat_cli
from fairseq_attn_reports.cli import results
from fairseq_attn_reports.cli import train_conditions as conditions_cli
from fairseq_attn_reports.significance import paired_tests, significance_mark
from fairseq_attn_reports.study_paths import load_table
from fairseq_attn_records.toy_corpus import make_corpus
from plain_stats import plain_mean_std

LOG = os.path.join(os.path.dirname(__file__), "data", "fairseq_json_resumed.train.log")
BS, AR = 100, 100
SEEDS = (1, 2, 3)


def write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def scramble(refs, keep, salt):
    return [r if ((i * 7919 + salt * 104729) % 1000) / 1000 < keep else " ".join(r.split()[::-1])
            for i, r in enumerate(refs)]


def plain_groups(docs, k):
    groups, current = [], []
    for i, d in enumerate(docs):
        if current and docs[current[0]] != d:
            current = []
        current.append(i)
        if len(current) == k:
            groups.append(current)
            current = []
    return groups


def run_dir(root, name, hyps):
    d = root / name
    d.mkdir(parents=True)
    shutil.copy(LOG, d / "train.log")
    write(d / "hyp.txt", hyps)
    return str(d)


def study(tmp_path, tag, quality, joined_of, segmentwise=True, lines=120, tests=(BS, AR)):
    """One condition's study on fake runs of three seeds: k = 1 outputs (``quality``: share kept in
    order per system and seed), k = 2 outputs ``joined_of(system, seed, segment-wise outputs)``;
    the tables of fairseq-attn-results (``tests``: resamples, trials), then the per-k table. Returns
    (lengths.json, groups, files)."""
    pairs = make_corpus(lines, seed=11)
    src, refs = [s for s, _ in pairs], [t for _, t in pairs]
    docs = [f"d{i // 7}" for i in range(len(refs))]  # documents of 7 lines: a line of each left over at k = 2
    root = tmp_path / tag
    files = {"src": write(root / "test.src", src), "ref": write(root / "test.tgt", refs),
             "docs": write(root / "test.docs", docs)}
    p = subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", "concat-test", "--src", files["src"],
                        "--ref", files["ref"], "--docs", files["docs"], "--ks", "1,2", "--out", str(root / "concat"),
                        "--src-lang", "src", "--tgt-lang", "tgt"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    groups = plain_groups(docs, 2)
    runs = {1: [], 2: []}
    for name, per_seed in quality.items():
        for seed in SEEDS:
            k1 = scramble(refs, per_seed[seed], seed + len(name))
            runs[1].append(run_dir(root / "k1", f"{name}_seed{seed}", k1))
            seg = [" ".join(k1[i] for i in g) for g in groups]
            runs[2].append(run_dir(root / "k2", f"{name}_seed{seed}", joined_of(name, seed, seg)))
    refs2 = str(root / "concat" / "k2.tgt")
    for k, ref, source in ((1, files["ref"], files["src"]), (2, refs2, str(root / "concat" / "k2.src"))):
        assert results.main(["--ref", ref, "--src", source, *runs[k], "--json", str(root / f"k{k}.json"),
                             "--bs-samples", str(tests[0]), "--ar-trials", str(tests[1])]) == 0
    lengths = root / "lengths.json"
    lengths.write_text("{}")
    assert by_concat_cli.main(["--study-json", str(lengths), "--study-md", str(root / "lengths.md"),
                               "--info", str(root / "concat" / "concat.json"), "--k", f"1={root / 'k1.json'}",
                               "--k", f"2={root / 'k2.json'}"]
                              + (["--segmentwise", str(root / "seg")] if segmentwise else [])) == 0
    return lengths, groups, {"refs": refs, "refs2": read(refs2), "root": root}


QUALITY = {"base": {1: 0.45, 2: 0.5, 3: 0.48}, "good": {1: 0.9, 2: 0.92, 3: 0.88}}


def stops_early(name, seed, seg):
    """The joined input's translation stops halfway: for 'good' on every seed, for 'base' on seeds
    1 and 2 (its seed 3 translates it as segment by segment)."""
    if name == "base" and seed == 3:
        return seg
    return [" ".join(s.split()[:len(s.split()) // 2]) for s in seg]


@pytest.fixture(scope="module")
def without(tmp_path_factory):
    return study(tmp_path_factory.mktemp("concat_tables"), "without", QUALITY, stops_early)


def test_segmentwise_rows_and_seed_aggregation_against_plain_computations(without):
    lengths, groups, files = without
    concat = load_table(lengths)["concat"]  # its paths relative to its folder, read back absolute
    refs2 = files["refs2"]
    assert refs2 == [" ".join(files["refs"][i] for i in g) for g in groups]
    for name in QUALITY:
        cell = concat["k"]["2"]["systems"][name]
        seg = cell["segmentwise"]
        bleus, chrfs, ratios, joined_bleus = [], [], [], []
        for i, seed in enumerate(SEEDS):
            # the segment-wise outputs: the k = 1 outputs of the same seed, grouped plainly
            k1 = read(files["root"] / "k1" / f"{name}_seed{seed}" / "hyp.txt")
            plain = [" ".join(k1[j] for j in g) for g in groups]
            assert read(seg["hyps"][i]) == plain and seg["seeds"][i] == seed
            b = sacrebleu.corpus_bleu(plain, [refs2])
            bleus.append(b.score)
            chrfs.append(sacrebleu.corpus_chrf(plain, [refs2], word_order=2).score)
            ratios.append(b.sys_len / b.ref_len)
            joined = read(files["root"] / "k2" / f"{name}_seed{seed}" / "hyp.txt")
            joined_bleus.append(sacrebleu.corpus_bleu(joined, [refs2]).score)
            # each seed's test: the paired tests of the joined outputs against the segment-wise ones
            p = paired_tests(refs2, [("seg", plain), ("joined", joined)], bs_samples=BS, ar_trials=AR)["systems"][1]
            t = seg["tests"]["bleu"][i]
            assert (t["p_bootstrap"], t["p_ar"]) == (p["p_bootstrap"], p["p_ar"])
            equal = plain == joined or joined_bleus[-1] == bleus[-1]  # no difference, no direction: no mark
            assert t["mark"] == ("" if equal else significance_mark([p["p_bootstrap"], p["p_ar"]]))
            assert abs(t["delta"] - (joined_bleus[-1] - bleus[-1])) < 1e-9
        got = torch.tensor([seg["scores"]["bleu"], seg["std"]["bleu"], seg["scores"]["chrf"], seg["std"]["chrf"],
                            seg["length_ratio"], seg["length_ratio_std"], seg["delta"]["bleu"]], dtype=torch.float64)
        want = [*plain_mean_std(bleus), *plain_mean_std(chrfs), *plain_mean_std(ratios),
                plain_mean_std(joined_bleus)[0] - plain_mean_std(bleus)[0]]
        torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))
        # the joined input's own cell: mean ± sample std over the three seeds, by hand
        torch.testing.assert_close(torch.tensor([cell["scores"]["bleu"], cell["std"]["bleu"]], dtype=torch.float64),
                                   torch.tensor(plain_mean_std(joined_bleus), dtype=torch.float64))
    # marks over seeds: 'good' stops early on every seed: segment by segment is better, on every seed;
    # 'base' translates it as segment by segment on seed 3 (identical outputs): no mark
    base, good = (concat["k"]["2"]["systems"][n]["segmentwise"] for n in ("base", "good"))
    marks = [t["mark"] for t in good["tests"]["bleu"]]
    assert all(marks) and all(t["delta"] < 0 for t in good["tests"]["bleu"])
    assert good["marks"]["bleu"] == min(marks, key=len) and good["better"]["bleu"] == "segment-wise"
    assert [bool(t["mark"]) for t in base["tests"]["bleu"]] == [True, True, False]
    assert base["marks"]["bleu"] == "" and base["better"]["bleu"] is None
    # the k tables' own marks against the baseline hold on every seed pair: 'good' beats 'base' at k = 1
    one = concat["k"]["1"]["systems"]["good"]
    assert one["marks"]["bleu"] == "**" and len(one["pairs"]["bleu"]) == 9
    md = (files["root"] / "lengths.md").read_text()
    assert md.count("| 2, segment by segment |") == 1
    assert f"{good['scores']['bleu']:.2f} ± {good['std']['bleu']:.2f} |" in md
    assert f"{good['delta']['bleu']:+.2f}{good['marks']['bleu']} |" in md
    assert "Joined input minus segment by segment" in md and "mean ± sample standard deviation" in md
    assert "Compare scores within a k, not across" in md  # n-grams match anywhere within a joined segment


def test_training_conditions_difference_tests_every_seed_pair(tmp_path, without):
    without, _, _ = without
    better = {"base": {1: 0.8, 2: 0.82, 3: 0.85}, "good": {1: 0.9, 2: 0.92, 3: 0.88}}  # 'good' unchanged
    with_, _, files = study(tmp_path, "with", better, stops_early, segmentwise=False)
    out_md, out_json = tmp_path / "d.md", tmp_path / "d.json"
    assert conditions_cli.main(["--without", str(without), "--with", str(with_), "--train-concat", "2",
                                "--md", str(out_md), "--json", str(out_json)]) == 0
    diff = load_table(out_json)
    a = load_table(without)["concat"]["k"]
    b = load_table(with_)["concat"]["k"]
    for k in ("1", "2"):
        base = diff["k"][k]["base"]
        assert abs(base["delta"]["bleu"] - (b[k]["systems"]["base"]["scores"]["bleu"]
                                            - a[k]["systems"]["base"]["scores"]["bleu"])) < 1e-9
        pairs = base["pairs"]["bleu"]
        assert len(pairs) == 9 and sorted((q["seed"], q["seed_without"]) for q in pairs) == [
            (x, y) for x in SEEDS for y in SEEDS]
        # the all-pairs rule, plainly: every pair significant, every delta of one sign
        ups = all(q["mark"] and q["delta"] > 0 for q in pairs)
        downs = all(q["mark"] and q["delta"] < 0 for q in pairs)
        weakest = "*" if any(q["mark"] == "*" for q in pairs) else "**"
        assert base["marks"]["bleu"] == (weakest if ups or downs else "")
        assert base["better"]["bleu"] == ("with" if ups else "without" if downs else None)
        if k == "1":  # every seed with the joined pairs beats every seed without them
            assert base["marks"]["bleu"] == "**" and base["better"]["bleu"] == "with"
        good = diff["k"][k]["good"]  # the same outputs in both conditions: no difference, no mark
        assert good["delta"]["bleu"] == 0 or abs(good["delta"]["bleu"]) < 1e-9
        assert good["marks"]["bleu"] == ""
    pair = diff["k"]["2"]["base"]["pairs"]["bleu"][0]
    refs2 = files["refs2"]
    p = paired_tests(refs2, [("a", read(a["2"]["seed_hyps"]["base"][str(pair["seed_without"])])),
                             ("b", read(b["2"]["seed_hyps"]["base"][str(pair["seed"])]))],
                     bs_samples=BS, ar_trials=AR)["systems"][1]
    assert (pair["p_bootstrap"], pair["p_ar"]) == (p["p_bootstrap"], p["p_ar"])
    assert "Concatenation training minus" in out_md.read_text() and "TRAIN_CONCAT=2" in out_md.read_text()


def test_equal_scores_have_p_one_and_no_mark():
    """sacreBLEU counts the trials whose difference exceeds the observed one, so two different outputs
    with the same score (both BLEU 0.0 here, in every resample) get p = 1 / (trials + 1) from it; a
    difference of 0 has p = 1 (every trial differs by at least 0), and so no mark."""
    from sacrebleu.significance import PairedTest

    from fairseq_attn_records import metrics as M
    from fairseq_attn_reports.segmentwise import pair_mark

    refs = [f"the {w} sat on the mat" for w in ("cat", "dog", "hen", "fox")] * 10
    a, b = ["qqq"] * len(refs), ["zzz zzz"] * len(refs)  # no character in common with the references
    cell = paired_tests(refs, [("a", a), ("b", b)], bs_samples=BS, ar_trials=AR)["systems"][1]["scores"]["bleu"]
    assert cell["score"] == sacrebleu.corpus_bleu(a, [refs]).score == 0.0 and not cell["same_as_baseline"]
    theirs = PairedTest([("a", a), ("b", b)], {"BLEU": sacrebleu.BLEU()}, references=[refs], test_type="bs",
                        n_samples=BS)()[1]["BLEU"][1].p_value
    assert theirs == 1 / (BS + 1)  # sacreBLEU's p-value of a zero difference where no resample differs
    assert cell["p_bootstrap"] == cell["p_ar"] == 1.0 and pair_mark(cell) == ""
    # the segment-mean metrics (COMET) alike: equal means of different segment scores
    base, mean = M.paired_mean_tests([("a", [0.2, 0.4] * 20), ("b", [0.4, 0.2] * 20)], BS, AR)
    assert mean["score"] == base["score"]
    assert mean["p_bootstrap"] == mean["p_ar"] == 1.0 and not mean["same_as_baseline"]


# ------------------------------------------------------------------ a committed study, re-scored from its outputs
def _repack(archive, changes):
    """The archive with some members' bytes replaced (``changes``: member -> bytes), everything else kept."""
    import io
    import tarfile
    with tarfile.open(archive, "r:xz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    members.update(changes)
    with tarfile.open(archive, "w:xz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_a_committed_study_is_rescored_from_its_outputs_and_every_change_is_named(tmp_path):
    """Two tiny studies of three seeds (the per-k tables, segment by segment) and their difference,
    committed with study-export and re-scored from the bundles; then a number, a mark, a p-value
    and an output changed, each named."""
    import hashlib
    import tarfile

    from fairseq_attn_reports.study_bundle import export, rescore

    tiny = dict(lines=42, tests=(20, 20))
    without, _, files = study(tmp_path, "without", QUALITY, stops_early, **tiny)
    better = {"base": {1: 0.8, 2: 0.82, 3: 0.85}, "good": {1: 0.9, 2: 0.92, 3: 0.88}}
    with_, _, _ = study(tmp_path, "with", better, stops_early, **tiny)
    assert conditions_cli.main(["--without", str(without), "--with", str(with_), "--md", str(tmp_path / "d.md"),
                                "--json", str(tmp_path / "d.json")]) == 0
    out = tmp_path / "results"
    manifest = export(str(without), str(out), "study")
    # the bundle: every output the table scores (each system, seed and k, the segment-by-segment ones), the
    # references and sources of each k and concat-test's record, below their common folder (the study's)
    root = files["root"]
    want = {f"{k}/{n}_seed{s}/hyp.txt" for k in ("k1", "k2") for n in QUALITY for s in SEEDS}
    want |= {f"seg/k2/{n}/seed{s}.txt" for n in QUALITY for s in SEEDS}
    want |= {"test.src", "test.tgt", "concat/k2.src", "concat/k2.tgt", "concat/concat.json", "test.docs"}
    assert set(manifest["files"]) == want and manifest["table_dir"] == "."
    with tarfile.open(out / "study" / "outputs.tar.xz", "r:xz") as tar:
        stored = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    for name in want - {"concat/concat.json"}:  # the files themselves, byte for byte, and their digests
        assert stored[name] == (root / name).read_bytes(), name
        assert manifest["files"][name]["sha256"] == hashlib.sha256(stored[name]).hexdigest()
    table = (out / "study.json").read_text()
    assert str(tmp_path) not in table and '"/' not in table  # no absolute path
    import numpy
    assert (manifest["numpy"], manifest["sacrebleu"], manifest["torch"]) == (numpy.__version__, sacrebleu.__version__,
                                                                            torch.__version__)
    from fairseq_attn_reports.study_bundle import BundleError
    # an output evaluated again after the tables were made (another BEAM): not the one the table scored,
    # refused in one line naming the run, the file and both sha256; nothing written
    rewritten = root / "k2" / "good_seed3" / "hyp.txt"
    scored = rewritten.read_bytes()
    rewritten.write_bytes(scored.replace(b"\n", b" .\n"))
    with pytest.raises(BundleError) as refused:
        export(str(without), str(out), "again")
    said = str(refused.value)
    assert "\n" not in said and f"{rewritten} of run {rewritten.parent} is not the output the table scored" in said
    assert hashlib.sha256(scored).hexdigest() in said and hashlib.sha256(rewritten.read_bytes()).hexdigest() in said
    assert not list(out.glob("again*"))
    rewritten.write_bytes(scored)
    # exported again under the same name: refused, nothing touched; --yes (replace) writes the same bytes
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(BundleError, match="study.json exists: give another --name, or --yes"):
        export(str(without), str(out), "study")
    export(str(without), str(out), "study", replace=True)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # re-scored from the bundle: every cell as the table has it (exit 0)
    p = subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", "study-rescore", str(out / "study.json")],
                       capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == "" and "cells re-scored from its outputs agree" in p.stdout, p.stderr
    # the difference of the two conditions: both studies go into its bundle, every seed pair tested again
    export(str(tmp_path / "d.json"), str(out), "conditions")
    assert rescore(str(out / "conditions.json")).diffs == []
    # a number, a mark, a p-value of a seed pair and a segment-by-segment std changed in the table, and one
    # output changed in the bundle (its digest too, as a careful forger would): each named, nothing else
    doc = json.loads(table)
    k2 = doc["concat"]["k"]["2"]["systems"]
    k2["good"]["scores"]["chrf"] += 0.01
    k2["good"]["marks"]["bleu"] = "*" if k2["good"]["marks"]["bleu"] != "*" else "**"
    doc["concat"]["k"]["1"]["systems"]["good"]["pairs"]["bleu"][4]["p_ar"] *= 1.5
    k2["base"]["segmentwise"]["std"]["bleu"] += 1e-6
    doc["concat"]["n_documents"] += 1  # a field the re-check does not compute: its digest tells it
    (out / "study.json").write_text(json.dumps(doc))
    md = (out / "study.md").read_text()
    number = re.search(r"\d+\.\d\d", md).group(0)
    (out / "study.md").write_text(md.replace(number, f"{float(number) + 0.01:.2f}", 1))  # a number of the text
    hyp = "k1/good_seed2/hyp.txt"
    changed = b"\n".join(line[: len(line) // 2] for line in stored[hyp].split(b"\n"))
    _repack(out / "study" / "outputs.tar.xz", {hyp: changed})
    man = json.loads((out / "study" / "manifest.json").read_text())
    man["files"][hyp]["sha256"] = hashlib.sha256(changed).hexdigest()
    (out / "study" / "manifest.json").write_text(json.dumps(man))
    p = subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", "study-rescore", str(out / "study.json")],
                       capture_output=True, text=True)
    said = p.stderr.splitlines()
    assert p.returncode == 1 and said[-1].startswith("error: ") and "difference(s) in" in said[-1]
    assert all(line.startswith("differs: ") for line in said[:-1])
    named = {line[len("differs: "):].split(": ")[0] for line in said[:-1]}
    assert str(out / "study" / "outputs.tar.xz") in named  # the archive's own digest
    assert {"study.json.concat.k[2].good.scores.chrf", "study.json.concat.k[2].good.marks.bleu",
            "study.json.concat.k[1].good.pairs.bleu[4].p_ar", "study.json.concat.k[2].base.segmentwise.std.bleu",
            "study.json.concat.k[1].good.per_seed.bleu[1]",  # the changed output's own cells
            "study.json.concat.k[2].good.segmentwise.per_seed.bleu[1]", "study.json", "study.md"} <= named
    assert "differs: study.json: sha256 differs from the manifest's: changed since it was exported (fields: concat)" in said
    assert not any("base.per_seed" in n or "good.per_seed.bleu[0]" in n for n in named)  # other outputs agree


def test_a_table_without_its_outputs_is_refused_in_one_line():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    table = os.path.join(root, "docs", "results", "lengths_bible_r2_pairs.json")
    p = subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", "study-rescore", table],
                       capture_output=True, text=True)
    assert p.returncode == 1 and len(p.stderr.splitlines()) == 1 and "no bundle of its outputs" in p.stderr
    assert "were not kept" in p.stderr
