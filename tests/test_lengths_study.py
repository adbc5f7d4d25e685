"""The train-short / test-long study's parts: the Greek-English New Testament read from the
bible-alignments package, and the position limits checked against the longest sentences."""

import csv
import hashlib
import os
import pathlib
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from cli_helpers import shared_data  # noqa: E402
from recipe_data import bible_corpus  # noqa: E402


def steps(*args):
    return subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", *args], capture_output=True, text=True)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


# ------------------------------------------------------------------ the bible corpus
def package_file(rel):
    from fairseq_attn_recipes import bible
    return str(bible.distribution().locate_file(rel))


def plain_verses():
    """Both sides of every verse, read with plain loops over the package's TSV files."""
    greek, english = {}, {}
    with open(package_file("data/sources/SBLGNT.tsv"), encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    for row in rows[1:]:
        verse = row[0][1:9]
        greek[verse] = (greek[verse] + " " + row[2]) if verse in greek else row[2]
    with open(package_file("data/eng/targets/BSB/nt_BSB.tsv"), encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    head = rows[0]
    for row in rows[1:]:
        row = dict(zip(head, row + [""] * len(head)))
        text = english.get(row["source_verse"], "") + row["text"]
        if row["skip_space_after"] != "y":
            text += " "
        english[row["source_verse"]] = text
    return greek, {v: " ".join(t.split()) for v, t in english.items()}


def test_bible_corpus_is_the_package_verses_split_by_chapter():
    corpus = pathlib.Path(bible_corpus())
    greek, english = plain_verses()
    both = [v for v in greek if v in english]
    seen, chapter_split = {}, {}
    for split in ("train", "valid", "test"):
        ids, grc, en, docs = (read(corpus / f"{split}.{x}") for x in ("ids", "grc", "en", "docs"))
        assert len(ids) == len(grc) == len(en) == len(docs)
        for v, g, e, d in zip(ids, grc, en, docs):
            assert g == greek[v] and e == english[v]
            assert d == v[:5]  # the document: book and chapter of BBCCCVVV
            bucket = int(hashlib.sha256(v[:5].encode()).hexdigest(), 16) % 100
            assert split == ("test" if bucket < 12 else "valid" if bucket < 17 else "train")
            assert chapter_split.setdefault(d, split) == split  # every chapter whole in one split
            seen[v] = split
    assert sorted(seen) == sorted(both) and len(seen) == 7936  # every verse with both sides, once
    # the split's numbers in the docs are the step's: every "train / valid / test" triple
    counts = [sum(1 for s in seen.values() if s == split) for split in ("train", "valid", "test")]
    chapters = len({d for d, s in chapter_split.items() if s == "test"})
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for doc in (os.path.join(root, "docs", "howto", "lengths.md"), os.path.join(root, "recipes", "bible_grc_en", "README.md")):
        text = open(doc, encoding="utf-8").read()
        triples = re.findall(r"(\d[\d,]*) / (\d[\d,]*) / (\d[\d,]*)", text)
        assert triples and all([int(n.replace(",", "")) for n in t] == counts for t in triples), (doc, triples, counts)
        assert f"({chapters} test chapters)" in text, doc
    assert read(corpus / "train.ids") == [v for v in greek if seen.get(v) == "train"]  # canonical order
    # the script check knows Greek: the sides as given pass, swapped they are refused
    ok = steps("check-script", "grc", str(corpus / "test.grc"), "en", str(corpus / "test.en"))
    assert ok.returncode == 0, ok.stderr
    bad = steps("check-script", "en", str(corpus / "test.grc"))
    assert bad.returncode == 1 and "Greek, expected Latin (en)" in bad.stderr


def test_the_joined_inputs_in_the_docs_are_those_of_the_committed_study():
    """The docs' counts of the bible's joined test inputs (the how-to and the study's report) are
    docs/results/lengths_bible.json's."""
    import json

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    concat = json.load(open(os.path.join(root, "docs", "results", "lengths_bible.json")))["concat"]
    ks = sorted(concat["k"], key=int)
    n = [concat["k"][k]["n"] for k in ks]
    docs = [os.path.join(root, "docs", "howto", "lengths.md"), os.path.join(root, "docs", "results", "lengths_study.md")]
    flat = " ".join(" ".join(open(doc, encoding="utf-8").read().split()) for doc in docs)
    assert f"With the bible's {n[0]} test verses in {concat['n_documents']} chapters:" in flat
    assert f"k = {', '.join(ks)} give {', '.join(map(str, n))} inputs" in flat
    assert f"on the {n[0]} test verses" in flat


def test_bible_recipe_refuses_another_pair(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, WORK=str(tmp_path / "w"), SRC="de", TGT="en")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run(["bash", os.path.join(root, "recipes", "bible_grc_en", "prepare.sh")], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 1 and "the bible corpus is Greek-English: SRC=grc TGT=en" in p.stderr


# ------------------------------------------------------------------ position limits
def longest_plain(root):
    """(longest source, longest target) of valid and test in tokens + EOS, from the raw text."""
    out = [0, 0]
    for split in ("valid", "test"):
        for i, lang in enumerate(("src", "tgt")):
            out[i] = max([out[i]] + [len(line.split()) + 1 for line in read(os.path.join(root, "raw", f"{split}.{lang}"))])
    return out


#: the architectures built narrow and shallow: the position limits do not depend on the widths, and the
#: step builds each model once or twice (fairseq's default sizes: ~45M parameters each to initialise)
NARROW = ("--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 16 --decoder-embed-dim 16 "
          "--encoder-ffn-embed-dim 16 --decoder-ffn-embed-dim 16 --encoder-attention-heads 2 --decoder-attention-heads 2")


def check(data, arch, model_args="", a=0.0, b=200):
    """The check-positions step, in this process (torch and fairseq are imported once per worker), on
    :data:`NARROW` models."""
    import contextlib
    import io
    import types

    from fairseq_attn_recipes.__main__ import main
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(["check-positions", "--data", data, "--src", "src", "--tgt", "tgt", "--arch", *arch.split(),
                  "--max-len-a", str(a), "--max-len-b", str(b), f"--model-args={NARROW} {model_args}"])
        except SystemExit as e:
            code = e.code
    return types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def flags(p):
    assert p.returncode == 0, p.stderr
    return {line.split("\t")[0]: line.split("\t")[1] for line in p.stdout.splitlines()}


def test_position_limits_raised_only_when_the_longest_sentence_or_output_needs_it():
    data = shared_data()
    src, tgt = longest_plain(os.path.dirname(data))
    # fairseq's limits (1024) hold the toy sentences and beam search's 200-token default
    assert flags(check(data, "transformer_attn_wmt_en_de transformer_rope_wmt_en_de")) == {
        "transformer_attn_wmt_en_de": "", "transformer_rope_wmt_en_de": ""}
    # outputs allowed to grow to 100 x source + 1000 tokens: the target limit is raised to hold them
    need_tgt = max(tgt, int(100 * src + 1000) + 1)
    assert need_tgt > 1024
    got = flags(check(data, "transformer_attn_wmt_en_de transformer_alibi_wmt_en_de", a=100, b=1000))
    want = f"--max-source-positions 1024 --max-target-positions {need_tgt}"
    assert got == {"transformer_attn_wmt_en_de": want, "transformer_alibi_wmt_en_de": want}


@pytest.mark.parametrize("model_args, a, b, message", [
    ("--max-source-positions=4 --max-target-positions=4", 0, 200,
     "MODEL_ARGS sets --max-source-positions 4; raise it to {src} or remove it"),
    ("--decoder-learned-pos", 100, 1000,
     "--decoder-learned-pos learns a table of 1024 rows, none beyond: train it with --max-target-positions {big}"),
])
def test_position_limits_refused_for_learned_tables_and_limits_the_user_set(model_args, a, b, message):
    data = shared_data()
    src, tgt = longest_plain(os.path.dirname(data))
    p = check(data, "transformer_attn_wmt_en_de", model_args, a, b)
    assert p.returncode == 1 and p.stdout == ""
    assert message.format(src=src, big=max(tgt, int(a * src + b) + 1)) in p.stderr
    assert len([line for line in p.stderr.splitlines() if line.startswith("error:")]) == 1


def test_position_limits_refused_when_a_piece_caps_them():
    """convattn1d caps --max-source-positions at --convattn-max-len: raising it does not help."""
    data = shared_data()
    src, _ = longest_plain(os.path.dirname(data))
    p = check(data, "transformer_convattn1d_wmt_en_de", f"--convattn-max-len={src - 1}")
    assert p.returncode == 1
    assert f"the model still reads only {src - 1} source" in p.stderr and "--convattn-max-len" in p.stderr


# ------------------------------------------------------------------ the QUICK study, end to end
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


LENGTHS_SH = os.path.join(ROOT, "recipes", "wmt14_en_de", "lengths.sh")


def lengths_env(env):
    # 20 resamples and trials: the tables' p-values need a test run, not a precise one (the default
    # beam stays: a smaller beam on these barely trained runs decodes to the length limit, 3 times slower)
    full = dict(os.environ, PYTHON=sys.executable, WORKERS="1", OMP_NUM_THREADS="1", NGPUS="0", QUICK="1",
                QUICK_SIZES="train=600,valid=60,test=120", MAX_UPDATE="24", SAVE_INTERVAL_UPDATES="12",
                N_AVG="1", LOG_INTERVAL="6", BS_SAMPLES="20", AR_TRIALS="20")
    full["PATH"] = os.path.dirname(sys.executable) + os.pathsep + full["PATH"]
    full.update(env)
    return full


def lengths_sh(env, check=True):
    p = subprocess.run(["bash", LENGTHS_SH], env=lengths_env(env), capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"lengths.sh failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def change_in_bundle(archive, member, new_bytes):
    """Rewrite a committed study's archive with ``member`` replaced by ``new_bytes(files)`` (every
    member's bytes by name), as a hand edit of a committed output would."""
    import io
    import tarfile
    with tarfile.open(archive, "r:xz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    files[member] = new_bytes(files)
    with tarfile.open(archive, "w:xz") as tar:
        for name, blob in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))


def one_error(p):
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert p.returncode == 1 and len(errors) == 1, p.stderr[-2000:]
    return errors[0]


@pytest.mark.e2e
def test_quick_study_trains_short_tests_long_and_reports_by_length(tmp_path):
    import json

    import sacrebleu

    work = tmp_path / "work"
    # CONCAT: the test set as it is, and joined 2 segments at a time; no document has 200 segments.
    # CONVERGE=2: trained until 2 validations without improvement, at most MAX_UPDATE=24 (the cap);
    # CURVE=24: each run evaluated at its checkpoint of update 24 (the one its N_AVG=1 evaluation averages)
    env = dict(WORK=str(work), ARCHS="baseline,alibi", CONCAT="1,2,200", CURVE="24", CONVERGE="2")
    # bad input first: nothing is prepared or trained
    assert "TRAIN_MAX_LEN=0" in one_error(lengths_sh(dict(env, TRAIN_MAX_LEN="0"), check=False))
    assert "CONCAT=1,2,2: 2 is given twice" in one_error(lengths_sh(dict(env, CONCAT="1,2,2"), check=False))
    assert "CONCAT=0,2: give the numbers" in one_error(lengths_sh(dict(env, CONCAT="0,2"), check=False))
    docs = tmp_path / "docs.txt"
    docs.write_text("d\n" * 7)
    assert f"TEST_DOCS={docs}: 7 lines, but the test source" in one_error(
        lengths_sh(dict(env, TEST_DOCS=str(docs)), check=False))
    assert "give at least two" in one_error(lengths_sh(dict(env, ARCHS="baseline"), check=False))
    assert "TRAIN_CONCAT=1: give how many" in one_error(lengths_sh(dict(env, TRAIN_CONCAT="1"), check=False))
    assert "seed 2 is given twice" in one_error(lengths_sh(dict(env, SEEDS="2 2"), check=False))
    assert "transformer_nope_wmt_en_de" in one_error(lengths_sh(dict(env, ARCHS="baseline,nope"), check=False))
    assert "CURVE=12,36: 36 is beyond the cap of MAX_UPDATE=24 updates" in one_error(
        lengths_sh(dict(env, CURVE="12,36"), check=False))
    assert not (work / "lengths").exists()

    p = lengths_sh(env)
    assert "no document has 200 segments" in p.stderr and "k = 200 skipped" in p.stderr
    # the study's log says each thing once, with no progress bar (it is not a terminal)
    assert (p.stdout + p.stderr).count("COMET left out") == 1, p.stderr[-3000:]
    assert "it/s]" not in p.stderr and "%|" not in p.stderr
    study = work / "lengths" / "max7" / "converge2"  # CONVERGE's runs: their own folder
    # the folder is the study of its settings: CONVERGE=3 into it refused in one line, before any step
    written = {f: f.stat().st_mtime_ns for f in study.rglob("*") if f.is_file()}
    said = one_error(lengths_sh(dict(env, CONVERGE="3", LENGTHS_DIR=str(study)), check=False))
    assert f"LENGTHS_DIR={study} is the study of CONVERGE=2 ({study / 'study_settings.json'}); CONVERGE=3 is" in said
    assert {f: f.stat().st_mtime_ns for f in study.rglob("*") if f.is_file()} == written
    corpus = work / "quick-corpus"
    test_src, test_ref = read(corpus / "test.src"), read(corpus / "test.tgt")
    assert max(len(s.split()) for s in test_src) > 7  # the test set holds sentences beyond the cap
    runs = {name: json.loads((study / name / "run.json").read_text()) for name in ("baseline", "alibi")}
    data = {r["data"]["path"] for r in runs.values()}
    assert len(data) == 1 and os.path.isdir(data.pop())
    data_dir = runs["baseline"]["data"]["path"]
    # the capped data: the pairs a plain count of source words keeps, then cleaned
    train_src = read(corpus / "train.src")
    kept = sum(1 for s in train_src if len(s.split()) <= 7)
    prep = json.loads(open(os.path.join(data_dir, "prepare.json")).read())
    assert prep["settings"]["TRAIN_MAX_LEN"] == "7"
    assert prep["train_pairs"]["cap"]["kept"] == kept < len(train_src)
    assert 0 < prep["train_pairs"]["clean"] <= kept
    # each run was evaluated on the whole test set of its own data
    for name, rec in runs.items():
        ev = rec["evaluations"]["test"]
        assert read(ev["ref"]) == test_ref
        assert len(read(study / name / "test" / "hyp.txt")) == len(test_ref)
        # fairseq-generate's log whole (the checkpoints averaged in its process first): its last line the count
        err = read(study / name / "test" / "generate.err")
        assert err[-1].startswith(f"INFO:fairseq_cli.generate:Translated {len(test_ref)} sentences"), err[-3:]
        assert not any("Logging error" in line for line in err)
    # the by-length table: every test sentence in one bucket, the buckets past 7 words marked,
    # each bucket's BLEU that of sacreBLEU on its lines
    from fairseq_attn_reports.study_paths import load_table
    on_disk = (study / "lengths.json").read_text()
    assert str(tmp_path) not in on_disk  # its paths relative to its folder: ./<name>/..., ../../data/...
    table = load_table(study / "lengths.json")["by_length"]
    assert sum(b["n"] for b in table["buckets"]) == len(test_ref)
    hyps = {name: read(study / name / "test" / "hyp.txt") for name in runs}
    for k, b in enumerate(table["buckets"]):
        lo, hi = b["lo"], b["hi"]
        idx = [i for i, s in enumerate(test_src)
               if (k == 0 or lo <= len(s.split())) and (hi is None or len(s.split()) <= hi)]
        assert len(idx) == b["n"]
        assert b["training"] == ("beyond" if lo > 7 else "within" if hi is not None and hi <= 7 else "partly beyond")
        for sys_row in b["systems"]:
            want = sacrebleu.corpus_bleu([hyps[sys_row["name"]][i] for i in idx], [[test_ref[i] for i in idx]]).score
            assert abs(sys_row["scores"]["bleu"]["score"] - want) < 1e-9
    assert any(b["training"] == "beyond" for b in table["buckets"])
    assert all(b["training"] != "partly beyond" for b in table["buckets"])  # 7 is an edge of "auto"
    md = (study / "lengths.md").read_text()
    assert "Scores by source length" in md and "beyond" in md
    assert (study / "lengths.png").stat().st_size > 10000
    # CONCAT: per k, the joined test set (one document: the test file in order), each run evaluated on
    # it by the evaluation step with its own record, its scores those of sacreBLEU on the files
    concat = load_table(study / "lengths.json")["concat"]
    assert list(concat["k"]) == ["1", "2"] and concat["documents"].startswith("the test file in order")
    assert "Scores by input length" in md
    one, two = concat["k"]["1"], concat["k"]["2"]
    assert read(one["ref"]) == test_ref and read(one["src"]) == test_src
    pairs = len(test_src) // 2
    assert read(two["src"]) == [test_src[2 * i] + " " + test_src[2 * i + 1] for i in range(pairs)]
    assert read(two["ref"]) == [test_ref[2 * i] + " " + test_ref[2 * i + 1] for i in range(pairs)]
    for k, entry in concat["k"].items():
        words = [len(s.split()) for s in read(entry["src"])]
        assert entry["n"] == len(words) and entry["max_src_words"] == max(words)
        assert abs(entry["mean_src_words"] - sum(words) / len(words)) < 1e-12
        refs = read(entry["ref"])
        for name, rec in runs.items():
            rec = json.loads((study / name / "run.json").read_text())
            subset = "test" if k == "1" else f"concat/k{k}.test"
            assert rec["evaluations"][subset]["ref"] == entry["ref"]
            assert entry["hyps"][name] == str(study / name / subset / "hyp.txt")
            hyps = read(entry["hyps"][name])
            got = entry["systems"][name]
            bleu = sacrebleu.corpus_bleu(hyps, [refs])
            assert abs(got["scores"]["bleu"] - bleu.score) < 1e-9
            assert abs(got["scores"]["chrf"] - sacrebleu.corpus_chrf(hyps, [refs], word_order=2).score) < 1e-9
            assert abs(got["length_ratio"] - bleu.sys_len / bleu.ref_len) < 1e-12
            if name == "baseline":
                assert got["p_bootstrap"] is None and got["p_ar"] is None
            else:
                assert set(got["p_bootstrap"]) == set(got["p_ar"]) == {"bleu", "chrf"}
                assert all(0 < p <= 1 for p in list(got["p_bootstrap"].values()) + list(got["p_ar"].values()))

    # the segment-by-segment row: each system's k = 1 outputs, two consecutive lines joined (one
    # document), scored by sacreBLEU against the joined references; its paired test per seed
    k1_hyps = {name: read(study / name / "test" / "hyp.txt") for name in runs}
    for name in runs:
        seg = concat["k"]["2"]["systems"][name]["segmentwise"]
        plain = [k1_hyps[name][2 * i] + " " + k1_hyps[name][2 * i + 1] for i in range(pairs)]
        assert read(seg["hyps"][0]) == plain
        refs2 = read(two["ref"])
        bleu = sacrebleu.corpus_bleu(plain, [refs2])
        assert abs(seg["scores"]["bleu"] - bleu.score) < 1e-9
        assert abs(seg["scores"]["chrf"] - sacrebleu.corpus_chrf(plain, [refs2], word_order=2).score) < 1e-9
        assert abs(seg["length_ratio"] - bleu.sys_len / bleu.ref_len) < 1e-12
        joined = concat["k"]["2"]["systems"][name]["scores"]["bleu"]
        assert abs(seg["delta"]["bleu"] - (joined - bleu.score)) < 1e-9
        assert 0 < seg["tests"]["bleu"][0]["p_bootstrap"] <= 1 and 0 < seg["tests"]["bleu"][0]["p_ar"] <= 1
    assert "| 2, segment by segment |" in (study / "lengths.md").read_text()
    assert "Training pairs: the original pairs of at most 7 source words" in (study / "lengths.md").read_text()

    # re-run: every run trained and evaluated before with the same settings is skipped, nothing is
    # decoded again (a PYTHON that refuses fairseq-generate), and the table is the same
    # While another study process holds a run (its .study.lock: here this test), the run is left to it
    # and the tables wait for it to end.
    from test_evaluation_reuse import no_generate
    import fcntl
    import time
    # a record written before its train.log could be read (the epoch "unknown"): read again at the re-run
    base_rec = json.loads((study / "baseline" / "run.json").read_text())
    known = base_rec["epoch"], base_rec["seen"]
    assert known[0]["updates"] and known[1]["epochs"]
    base_rec["epoch"], base_rec["seen"] = dict(known[0], updates=None, unknown="train.log: epochs of different lengths"), None
    (study / "baseline" / "run.json").write_text(json.dumps(base_rec))
    held = open(study / "alibi" / ".study.lock", "a")
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    err_path = tmp_path / "rerun.err"
    written = (study / "lengths.json").stat().st_mtime_ns
    with open(err_path, "w") as err:
        proc = subprocess.Popen(["bash", LENGTHS_SH], env=lengths_env(dict(env, PYTHON=no_generate(tmp_path))),
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
    waiting = f"waiting: another study process trains or evaluates {study / 'alibi'}"
    deadline = time.time() + 300
    while waiting not in err_path.read_text():
        assert proc.poll() is None and time.time() < deadline, err_path.read_text()[-2000:]
        time.sleep(0.2)
    assert f"{study / 'alibi'}: another study process trains or evaluates this run: left to it" in err_path.read_text()
    assert (study / "lengths.json").stat().st_mtime_ns == written  # no table written while a run is held
    fcntl.flock(held, fcntl.LOCK_UN)
    held.close()
    assert proc.wait(timeout=300) == 0, err_path.read_text()[-2000:]
    stderr = err_path.read_text()
    assert stderr.count("evaluated before with the same settings, files and checkpoints: skipped") == 4  # baseline: k = 1, 2 x (run, CURVE)
    assert load_table(study / "lengths.json")["by_length"] == table
    base_rec = json.loads((study / "baseline" / "run.json").read_text())
    assert (base_rec["epoch"], base_rec["seen"]) == known

    # committed with its outputs, and re-scored from them: every cell and mark as the table has them; one
    # output changed in the bundle: the cells of that system and k differ, and the file's digest
    from fairseq_attn_reports.study_bundle import export, rescore
    out = tmp_path / "results"
    manifest = export(str(study / "lengths.json"), str(out), "quick")
    assert {"lengths/max7/converge2/alibi/concat/k2.test/hyp.txt", "lengths/max7/converge2/baseline/test/hyp.txt",
            f"data/{os.path.basename(data_dir)}/raw/test.tgt"} <= set(manifest["files"])
    assert manifest["table_dir"] == "lengths/max7/converge2" and str(tmp_path) not in (out / "quick.json").read_text()
    assert (out / "quick.md").read_text() == (study / "lengths.md").read_text()
    agreed = rescore(str(out / "quick.json"))
    assert agreed.diffs == [] and agreed.checked > 200
    member = "lengths/max7/converge2/alibi/concat/k2.test/hyp.txt"
    ref = f"data/{os.path.basename(data_dir)}/raw/concat/k2.test.tgt"
    change_in_bundle(out / "quick" / "outputs.tar.xz", member, lambda files: files[ref])  # the reference itself
    named = {d.split(": ")[0] for d in rescore(str(out / "quick.json")).diffs}
    assert f"{member}" in named and "quick.json.concat.k[2].alibi.scores.bleu" in named
    assert not any(".k[1]." in n or "baseline.scores" in n or "by_length" in n for n in named)
    curve_and_convergence_checks(study, runs, work)


def curve_and_convergence_checks(study, runs, work):
    """CONVERGE and CURVE of the QUICK study (its outputs): the stop where a plain reading of each run's
    validation losses puts it, the record's updates those of its last checkpoint, what it has seen counted
    from the training text, and the curve's point the plain evaluation of the checkpoint of that update."""
    import json

    import sacrebleu
    import torch

    from fairseq_attn_recipes.checkpoints import checkpoints_to_average
    train_src, train_tgt = read(work / "bpe" / "train.clean.src"), read(work / "bpe" / "train.clean.tgt")
    for name in runs:
        rec = json.loads((study / name / "run.json").read_text())
        log = read(study / name / "train.log")
        valid = [json.loads(line[line.index("{"):]) for line in log if "| valid |" in line]
        # validations every SAVE_INTERVAL_UPDATES=12 updates, none at the epoch ends (8, 16)
        assert [int(v["valid_num_updates"]) for v in valid] == [12, 24]
        best, waited, stop = None, 0, None
        for v in valid:
            loss = float(v["valid_loss"])
            if best is None or loss < best:
                best, waited = loss, 0
            else:
                waited += 1
                if waited == 2:
                    stop = int(v["valid_num_updates"])
                    break
        assert rec["num_updates"] == (stop or 24)
        assert rec["trainings"][-1]["stopped"] == ("patience" if stop else None)
        last = torch.load(study / name / "checkpoint_last.pt", map_location="cpu", weights_only=False)
        assert last["optimizer_history"][-1]["num_updates"] == rec["num_updates"]
        assert "--patience" in rec["trainings"][-1]["argv"] and "--keep-interval-updates-pattern" in rec["trainings"][-1]["argv"]
        if name == "alibi":  # a finer curve later keeps other checkpoint files (--keep-interval-updates-pattern
            # 12): finished before, nothing is trained; another lr is another training
            argv = rec["trainings"][-1]["argv"]
            i, j = argv.index("--keep-interval-updates-pattern"), argv.index("--lr")
            finer = argv[:i + 1] + ["12"] + argv[i + 2:]
            for args, code in ((argv, 0), (finer, 0), (argv[:j + 1] + ["1e-4"] + argv[j + 2:], 1)):
                assert subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", "finished-before", "--save-dir",
                                       str(study / name), "--", *args], cwd=ROOT).returncode == code, args
        # what it has seen: epochs of 8 updates (the log's epoch records), each the capped training pairs once
        ends = [int(json.loads(line[line.index("{"):])["train_num_updates"]) for line in log if "| train |" in line]
        assert ends == [8, 16, 24] and rec["epoch"]["updates"] == 8
        src_tokens = sum(len(line.split()) + 1 for line in train_src)  # + EOS
        tgt_tokens = sum(len(line.split()) + 1 for line in train_tgt)
        assert rec["seen"] == {"updates": 24, "epochs": 3.0, "pairs": 3.0 * len(train_src),
                               "original_pairs": 3.0 * len(train_src), "src_tokens": 3.0 * src_tokens,
                               "tgt_tokens": 3.0 * tgt_tokens}
        # a checkpoint of an earlier update: the save point of that update, refused for one never saved
        chosen = checkpoints_to_average(str(study / name), 1, at_update=12)
        assert [os.path.basename(c["file"]) for c in chosen] == ["checkpoint_2_12.pt"]
        assert torch.load(chosen[0]["file"], map_location="cpu", weights_only=False)["optimizer_history"][-1]["num_updates"] == 12

    # the training lengths in each condition's tables
    training = json.loads((study / "lengths.json").read_text())["training"]
    assert [r["system"] for r in training] == list(runs)
    for r in training:
        assert r["updates"]["per_seed"] == [24] and r["stopped"] == ["cap"] and r["cap"] == [24]
        assert r["original_pairs"]["mean"] == 3.0 * len(train_src)
    assert "| pairs alone | baseline | 24 | cap | 24 | 3.0 |" in (study / "lengths.md").read_text()

    # the curve: each point the single checkpoint of update 24, the one the run's own evaluation (N_AVG=1)
    # scored; its scores sacreBLEU's on that plain evaluation's outputs
    curve = json.loads((study / "curve.json").read_text())
    assert curve["points"] == [24] and curve["k"] == ["1", "2"] and not curve["missing"]
    assert [(r["system"], r["condition"], r["updates"]) for r in curve["rows"]] == [(n, "pairs alone", 24) for n in runs]
    for row in curve["rows"]:
        rec = json.loads((study / row["system"] / "run.json").read_text())
        assert row["seen"]["epochs"]["mean"] == 3.0 and row["seen"]["original_pairs"]["mean"] == 3.0 * len(train_src)
        for label, subset in (("1", "test"), ("2", "concat/k2.test")):
            point, plain = rec["evaluations"][f"curve/u24/{subset}"], rec["evaluations"][subset]
            assert [(a["file"], a["num_updates"]) for a in point["averaged"]] == [("checkpoint3.pt", 24)]
            assert point["averaged"] == plain["averaged"]
            hyps = read(study / row["system"] / "curve" / "u24" / subset / "hyp.txt")
            assert hyps == read(study / row["system"] / subset / "hyp.txt")
            refs = read(plain["ref"])
            bleu = sacrebleu.corpus_bleu(hyps, [refs])
            got = row["k"][label]
            assert got["bleu"]["per_seed"] == [bleu.score] and point["scores"]["bleu"]["score"] == bleu.score
            assert got["chrf"]["per_seed"] == [sacrebleu.corpus_chrf(hyps, [refs], word_order=2).score]
            assert got["length_ratio"]["per_seed"] == [bleu.sys_len / bleu.ref_len]
    assert all((study / f"curve_{name}.png").stat().st_size > 10000 for name in runs)
    assert [r["k"] for r in curve["ranking"]] == ["1", "2"] and all(r["stable_from"] == 24 for r in curve["ranking"])
    for r in curve["ranking"]:  # one point: the systems by their BLEU there
        bleu = {row["system"]: row["k"][r["k"]]["bleu"]["mean"] for row in curve["rows"]}
        assert r["orders"][0]["order"] == sorted(bleu, key=lambda s: -bleu[s])

    # the curve committed with its outputs and re-scored from them; one point's output changed: named
    from fairseq_attn_reports.study_bundle import export, rescore
    out = work.parent / "curve_results"
    manifest = export(str(study / "curve.json"), str(out), "quick_curve")
    member = "lengths/max7/converge2/alibi/curve/u24/test/hyp.txt"
    assert member in manifest["files"]
    agreed = rescore(str(out / "quick_curve.json"))
    assert agreed.diffs == [] and agreed.checked >= 2 * 2 * 3 + 2, agreed.diffs
    change_in_bundle(out / "quick_curve" / "outputs.tar.xz", member,
                     lambda files: b"".join(line + b" extra\n" for line in files[member].splitlines()))
    named = {d.split(": ")[0] for d in rescore(str(out / "quick_curve.json")).diffs}
    assert member in named and "quick_curve.json.rows[alibi, pairs alone, 24].k[1].length_ratio.mean" in named, named
    assert not any("baseline" in n or ".k[2]." in n for n in named), named

    # a lower patience whose stop the run is past (a validation at 18 without improvement: patience 1 stops
    # at 18, the run holds 24 updates): refused in one line naming both, nothing trained or written
    import contextlib
    import io

    from fairseq_attn_recipes import train
    run = study / "baseline"
    log = (run / "train.log").read_text()
    first = next(json.loads(line[line.index("{"):]) for line in log.splitlines() if "| valid |" in line)
    worse = dict(first, valid_loss=f"{float(first['valid_loss']) + 1:.3f}", valid_num_updates="18")
    (run / "train.log").write_text(log + f"2026-11-29 00:00:00 | INFO | valid | {json.dumps(worse)}\n")
    argv = json.loads((run / "run.json").read_text())["trainings"][-1]["argv"]
    i = argv.index("--patience")
    before = {f: f.stat().st_mtime_ns for f in run.iterdir()}
    with contextlib.redirect_stderr(io.StringIO()) as err:
        assert train.main(argv[:i + 1] + ["1"] + argv[i + 2:]) == 1
    said = [line for line in err.getvalue().splitlines() if line.startswith("error:")]
    assert len(said) == 1 and f"{run} was trained to update 24 (trained with --patience 2), past where --patience 1 " \
        "stops it: update 18" in said[0], err.getvalue()
    assert {f: f.stat().st_mtime_ns for f in run.iterdir()} == before
    (run / "train.log").write_text(log)


# ------------------------------------------------------------------ the sweep route (bad input only)
@pytest.mark.parametrize("content, message", [
    (None, "SWEEP=FILE: give the settings to sweep"),
    ("a\tLR=1e-3\na\tLR=2e-3\n", "'a' is given twice"),
    ("a\tlr=1e-3\n", "'lr=1e-3' (line of a) is not VAR=VALUE"),
    ("# only a comment\n", "no settings in it"),
])
def test_sweep_refuses_bad_settings_before_any_work(tmp_path, content, message):
    env = dict(os.environ, PYTHON=sys.executable, WORK=str(tmp_path / "w"))
    if content is not None:
        (tmp_path / "sweep.tsv").write_text(content)
        env["SWEEP"] = str(tmp_path / "sweep.tsv")
    else:
        env.pop("SWEEP", None)
    p = subprocess.run(["bash", os.path.join(ROOT, "recipes", "bible_grc_en", "sweep.sh")], env=env,
                       capture_output=True, text=True)
    assert message in one_error(p)
    assert not (tmp_path / "w").exists()
