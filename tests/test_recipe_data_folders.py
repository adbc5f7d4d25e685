"""Prepared data that coexist in one WORK (WORK/data/<id>, WORK/data-bin naming the latest), each
run evaluated on its own data and reference, data.sh list|prune, and the TRAIN_MAX_LEN cap: real
recipe runs on the tiny corpora of test_recipes."""

import json
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import recipe_data  # noqa: E402
from test_recipes import RECIPES, prepared_ende, read, run, trained_ende, trained_run  # noqa: E402


def data_id(folder):
    return json.load(open(os.path.join(folder, "prepare.json")))["data_id"]


def latest(work):
    return os.path.realpath(os.path.join(work, "data-bin"))


def data_sh(env, *action, check=True):
    full = dict(os.environ, PYTHON=sys.executable, **env)
    full["PATH"] = os.path.dirname(sys.executable) + os.pathsep + full["PATH"]
    p = subprocess.run(["bash", os.path.join(RECIPES, "wmt14_en_de", "data.sh"), *action], env=full,
                       capture_output=True, text=True)
    assert p.returncode == 0 or not check, p.stderr
    return p


def one_error(p, code=1):
    assert p.returncode == code and p.stderr.count("error: ") == 1, p.stderr
    return [line for line in p.stderr.splitlines() if line.startswith("error: ")][0]


@pytest.mark.e2e
@pytest.mark.xdist_group("ende_trained_run")  # starts from trained_ende (test_copies, test_evaluation_reuse...)
def test_prepared_data_coexist_and_each_run_evaluates_on_its_own(tmp_path):
    env = trained_ende(tmp_path / "work")  # its run trained on the first data (WORK/runs/transformer_attn_wmt_en_de)
    work = env["WORK"]
    # the keyed layout: data-bin is a relative symlink to data/<first 12 hex of data_id>
    link = os.path.join(work, "data-bin")
    first = latest(work)
    assert os.path.islink(link) and os.readlink(link) == os.path.join("data", data_id(first)[:12])
    assert os.path.dirname(first) == os.path.realpath(os.path.join(work, "data"))
    for split in ("valid", "test"):  # the raw source and reference, kept with the data
        assert read(os.path.join(first, "raw", f"{split}.en")) == read(env[f"{split.upper()}_SRC"])
        assert read(os.path.join(first, "raw", f"{split}.de")) == read(env[f"{split.upper()}_TGT"])

    save = os.path.join(work, "runs", "transformer_attn_wmt_en_de")
    # its records name the data folder it was trained on, resolved (not data-bin), where the run was trained
    # (the WORK of trained_ende, copied here since)
    trained_on = os.path.join(os.path.realpath(trained_run()[1]["work"]), "data", os.path.basename(first))
    assert json.load(open(os.path.join(save, "run.json")))["data"]["path"] == trained_on
    assert json.load(open(os.path.join(save, "data.json")))["data"] == trained_on

    # another corpus (other training and test sets, other merges) in the same WORK: a second folder
    other = recipe_data.write_pair(str(tmp_path / "other"), "en", "de", seed=7)
    env_b = dict(env, **other, BPE_MERGES="50")
    run("wmt14_en_de", "prepare.sh", env_b)
    second = latest(work)
    assert second != first and sorted(os.listdir(os.path.join(work, "data"))) == sorted(
        [os.path.basename(first), os.path.basename(second)])
    assert read(os.path.join(work, "raw", "test.de")) == read(other["TEST_TGT"]) != read(env["TEST_TGT"])

    # the first run still evaluates (N_AVG=1: not the evaluation it holds), on its own data against its own reference
    p = run("wmt14_en_de", "evaluate.sh", dict(env, N_AVG="1"))
    assert f"data: {first} (the run's own" in p.stderr and f"{save}/test: evaluated again: N_AVG: '2' -> '1'" in p.stderr
    ev = json.load(open(os.path.join(save, "run.json")))["evaluations"]["test"]
    assert ev["ref"] == os.path.join(first, "raw", "test.de")
    import sacrebleu
    hyp = read(os.path.join(save, "test", "hyp.txt"))
    assert len(hyp) == len(read(env["TEST_TGT"]))
    assert ev["scores"]["bleu"]["score"] == round(sacrebleu.corpus_bleu(hyp, [read(env["TEST_TGT"])]).score, 2)

    # a third preparation makes the second unreferenced; list names the references
    run("wmt14_en_de", "prepare.sh", dict(env, BPE_MERGES="40"))
    third = latest(work)
    outside = tmp_path / "outside"  # a symlink in WORK/data is never followed nor removed
    shutil.copytree(second, outside)
    os.symlink(outside, os.path.join(work, "data", "elsewhere"))
    p = data_sh(env, "list")
    lines = {line.split()[0]: line for line in p.stdout.splitlines()}
    assert set(lines) == {os.path.basename(f) for f in (first, second, third)}
    assert lines[os.path.basename(first)].endswith("referenced by: runs/transformer_attn_wmt_en_de")
    assert "bpe=subword-nmt:50" in lines[os.path.basename(second)] and lines[os.path.basename(second)].endswith(
        "referenced by: nothing")
    assert lines[os.path.basename(third)].endswith("referenced by: data-bin")
    p = data_sh(env, "prune", "--yes")
    assert f"removed {second} (" in p.stdout and "1 unreferenced data folder(s) removed" in p.stdout
    assert not os.path.exists(second) and os.path.isdir(first) and os.path.isdir(third)
    assert os.path.isfile(outside / "prepare.json") and os.path.islink(os.path.join(work, "data", "elsewhere"))

    # an explicit DATA that is not the run's data: one line
    line = one_error(run("wmt14_en_de", "evaluate.sh", dict(env, DATA=third), check=False))
    assert f"DATA={third}" in line and "is not the data the run" in line and save in line
    # the run's folder removed by hand: one line naming the run and the missing folder
    shutil.rmtree(first)
    line = one_error(run("wmt14_en_de", "evaluate.sh", env, check=False))  # (its record names where it was trained)
    assert f"the run {save} was trained on {trained_on} (data_id {os.path.basename(first)})" in line
    assert "no longer exists" in line
    assert "re-run prepare.sh with the settings it was prepared with (BPE_MERGES=60 " in line and "or train again" in line


def clean_kept(src, tgt, keep, lo=1, hi=250, ratio=1.5):
    """The recipe's cleaning written plainly: the pairs among ``keep`` within the length limits and ratio."""
    out = []
    for i in keep:
        ls, lt = len(src[i].split()), len(tgt[i].split())
        if lo <= ls <= hi and lo <= lt <= hi and ls / lt <= ratio and lt / ls <= ratio:
            out.append(i)
    return out


@pytest.mark.e2e
def test_train_max_len_drops_the_long_training_sources_only(tmp_path):
    env = prepared_ende(tmp_path / "work")
    work = env["WORK"]
    full = latest(work)
    raw = read(env["TRAIN_SRC"])
    longest = max(len(line.split()) for line in raw)
    shortest = min(len(line.split()) for line in raw)
    # bad caps: one line each, before any work (data-bin unchanged, nothing redone)
    for cap, says in (("0", "TRAIN_MAX_LEN=0: give the most source words a training pair may have, a positive integer"),
                      ("-2", "TRAIN_MAX_LEN=-2: give"), ("ten", "TRAIN_MAX_LEN=ten: give"),
                      (str(longest), f"TRAIN_MAX_LEN={longest} keeps every training pair (the longest source has "
                                     f"{longest} words): nothing is capped"),
                      (str(shortest - 1), f"TRAIN_MAX_LEN={shortest - 1} leaves no training pair")):
        p = run("wmt14_en_de", "prepare.sh", dict(env, TRAIN_MAX_LEN=cap), check=False)
        assert one_error(p).startswith("error: " + says), p.stderr
        assert "] raw" not in p.stderr and latest(work) == full

    cap = longest - 1
    codes = read(os.path.join(work, "bpe", "codes"))
    run("wmt14_en_de", "prepare.sh", dict(env, TRAIN_MAX_LEN=str(cap)))
    assert read(os.path.join(work, "bpe", "codes")) == codes  # BPE codes: learned on the full training set
    capped = latest(work)
    assert capped != full and os.path.isdir(full)
    rec = json.load(open(os.path.join(capped, "prepare.json")))
    keep = [i for i, line in enumerate(raw) if len(line.split()) <= cap]
    assert 0 < len(keep) < len(raw)
    assert rec["settings"]["TRAIN_MAX_LEN"] == str(cap)
    assert {k: rec["train_pairs"]["cap"][k] for k in ("max_src_words", "words_of", "kept", "dropped")} == {
        "max_src_words": cap, "words_of": "raw", "kept": len(keep), "dropped": len(raw) - len(keep)}
    bpe_src, bpe_tgt = read(os.path.join(work, "bpe", "train.en")), read(os.path.join(work, "bpe", "train.de"))
    kept = clean_kept(bpe_src, bpe_tgt, keep)
    assert read(os.path.join(work, "bpe", "train.clean.en")) == [bpe_src[i] for i in kept]
    assert read(os.path.join(work, "bpe", "train.clean.de")) == [bpe_tgt[i] for i in kept]
    assert rec["train_pairs"]["clean"] == len(kept) and rec["train_pairs"]["raw"] == len(raw)
    from fairseq.data import indexed_dataset
    binarised = indexed_dataset.make_dataset(os.path.join(capped, "train.en-de.en"), impl="mmap")
    assert len(binarised) == len(kept) < json.load(open(os.path.join(full, "prepare.json")))["train_pairs"]["clean"]
    # the same dictionary as the uncapped data (made from the uncapped pairs); valid/test whole
    for name in ("dict.en.txt", "dict.de.txt", "valid.en-de.en.bin", "test.en-de.de.bin"):
        assert open(os.path.join(capped, name), "rb").read() == open(os.path.join(full, name), "rb").read(), name
    # train.sh without the cap refuses the capped data, naming it
    p = run("wmt14_en_de", "train.sh", dict(env, MAX_UPDATE="1"), check=False)
    assert f"TRAIN_MAX_LEN='{cap}' there, TRAIN_MAX_LEN=None here" in one_error(p)

    # TRAIN_CONCAT: the capped, cleaned pairs and their joins of 2 consecutive pairs of one document
    # (TRAIN_DOCS), a data folder of its own beside the capped one, with its dictionary
    docs = [f"doc{i // 4}" for i in range(len(raw))]
    (tmp_path / "train.docs").write_text("".join(d + "\n" for d in docs))
    for bad, says in (("1", "TRAIN_CONCAT=1: give how many training pairs are joined into one"),):
        p = run("wmt14_en_de", "prepare.sh", dict(env, TRAIN_MAX_LEN=str(cap), TRAIN_CONCAT=bad), check=False)
        assert one_error(p).startswith("error: " + says) and "] raw" not in p.stderr and latest(work) == capped
    run("wmt14_en_de", "prepare.sh", dict(env, TRAIN_MAX_LEN=str(cap), TRAIN_CONCAT="2",
                                          TRAIN_DOCS=str(tmp_path / "train.docs")))
    joined = latest(work)
    assert joined not in (capped, full) and os.path.isdir(capped)
    kept_docs = [docs[i] for i in kept]
    windows = [[i, i + 1] for i in range(len(kept) - 1) if kept_docs[i] == kept_docs[i + 1]]
    assert 0 < len(windows) < len(kept) - 1  # some neighbours are of another document
    clean_src, clean_tgt = [bpe_src[i] for i in kept], [bpe_tgt[i] for i in kept]
    assert read(os.path.join(work, "bpe", "train.concat.en")) == clean_src + [
        clean_src[i] + " " + clean_src[j] for i, j in windows]
    assert read(os.path.join(work, "bpe", "train.concat.de")) == clean_tgt + [
        clean_tgt[i] + " " + clean_tgt[j] for i, j in windows]
    assert read(os.path.join(joined, "raw", "train.concat.groups")) == [f"{i + 1} {j + 1}" for i, j in windows]
    rec = json.load(open(os.path.join(joined, "prepare.json")))
    assert rec["settings"]["TRAIN_CONCAT"] == "2" and rec["settings"]["TRAIN_MAX_LEN"] == str(cap)
    assert rec["train_pairs"]["cap"]["kept"] == len(keep) and rec["train_pairs"]["clean"] == len(kept)
    assert rec["train_pairs"]["concat"]["k"] == {"2": {"n": len(windows)}}
    assert rec["train_pairs"]["concat"]["seed"] is None
    binarised = indexed_dataset.make_dataset(os.path.join(joined, "train.en-de.en"), impl="mmap")
    assert len(binarised) == len(kept) + len(windows)
    for name in ("dict.en.txt", "dict.de.txt", "valid.en-de.en.bin", "test.en-de.de.bin"):
        assert open(os.path.join(joined, name), "rb").read() == open(os.path.join(capped, name), "rb").read(), name
    from fairseq_attn_reports.by_concat import training_note
    note = training_note(rec)
    assert f"at most {cap} source words" in note and "TRAIN_CONCAT=2" in note and "consecutive pairs of one document" in note
    assert f"the joined pairs added (k = 2: {len(windows):,} joined pairs;" in note
    # train.sh without TRAIN_CONCAT refuses it, naming it
    p = run("wmt14_en_de", "train.sh", dict(env, TRAIN_MAX_LEN=str(cap), MAX_UPDATE="1"), check=False)
    assert "TRAIN_CONCAT='2' there, TRAIN_CONCAT=None here" in one_error(p)
    assert "give 'list'" in one_error(data_sh(env, "nonsense", check=False), code=2)
    # back to the first setting (lengths.sh's two conditions, each start): binarised before, not again (each
    # setting its entry: the unit test above), data-bin pointed at its folder
    p = run("wmt14_en_de", "prepare.sh", dict(env, TRAIN_MAX_LEN=str(cap)))
    assert "binarise: done before, skipped" in p.stderr and "binarise: redone" not in p.stderr, p.stderr[-2000:]
    assert latest(work) == capped

    # TRAIN_DOCS is recorded with its digest (the joined pairs depend on it) and named by the
    # re-prepare hint of a run on this data once its folder is gone (evaluate.sh's run-data step,
    # on the data record train.sh writes into run.json), beside only variables a user can set
    import hashlib
    from fairseq_attn_recipes.recording import _data_record
    from test_prepare_refusals import named_variables, settable_variables
    given = [i for i in rec["inputs"] if i["name"] == "TRAIN_DOCS"]
    blob = (tmp_path / "train.docs").read_bytes()
    assert given == [{"name": "TRAIN_DOCS", "path": str(tmp_path / "train.docs"), "bytes": len(blob),
                      "sha256": hashlib.sha256(blob).hexdigest()}]
    save = tmp_path / "joined-run"
    save.mkdir()
    (save / "run.json").write_text(json.dumps({"data": _data_record(joined)}))
    os.rename(joined, joined + ".aside")
    p = subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", "run-data", "--run-dir", str(save), "--work", work],
                       capture_output=True, text=True)
    hint = one_error(p)
    assert "re-run prepare.sh with the settings it was prepared with (" in hint
    assert f"TRAIN_DOCS={tmp_path / 'train.docs'} (" in hint and "TRAIN_CONCAT=2 " in hint
    assert "CLEAN_MAX=250 CLEAN_MIN=1 CLEAN_RATIO=1.5 " in hint and "CLEAN=" not in hint
    assert named_variables(hint) <= settable_variables(), named_variables(hint) - settable_variables()


def test_a_per_setting_record_keeps_each_settings_entry_and_its_output(tmp_path):
    """binarise's record (fingerprint --per-setting): one entry per setting, each naming the folder it
    made; a setting done before, its folder there, is SAME; another setting's entry is kept when one is
    (re)done; its inputs changed: CHANGED, named; its folder gone: NOT_DONE."""
    from fairseq_attn_recipes.fingerprints import (CHANGED, NOT_DONE, SAME, fingerprint, made_by_setting,
                                                   mark_made, per_setting_state)
    work = str(tmp_path)
    src = tmp_path / "train.en"
    src.write_text("a b\n")
    record = tmp_path / "binarise"
    a, b = fingerprint({"TRAIN_CONCAT": ""}, [str(src)], work), fingerprint({"TRAIN_CONCAT": "2"}, [str(src)], work)
    for name in ("data/aaa", "data/bbb"):
        os.makedirs(tmp_path / name)
        (tmp_path / name / "prepare.json").write_text("{}")
    assert per_setting_state(str(record), a, work) == (NOT_DONE, "", [])
    record.write_text(json.dumps({"per_setting": [dict(a, made="data/aaa")]}))
    assert per_setting_state(str(record), a, work)[0] == SAME
    state, _, kept = per_setting_state(str(record), b, work)
    assert state == NOT_DONE and kept == [dict(a, made="data/aaa")]  # a's entry stays beside b's
    record.write_text(json.dumps({"per_setting": kept + [b]}))
    mark_made(str(record), "data/bbb")
    assert made_by_setting(str(record), {"TRAIN_CONCAT": "2"}, work) == "data/bbb"
    assert made_by_setting(str(record), {"TRAIN_CONCAT": ""}, work) == "data/aaa"
    assert [per_setting_state(str(record), f, work)[0] for f in (a, b)] == [SAME, SAME]
    src.write_text("a b c\n")  # an input changed: redone, the change named
    state, changes, kept = per_setting_state(str(record), fingerprint({"TRAIN_CONCAT": ""}, [str(src)], work), work)
    assert (state, changes) == (CHANGED, "input changed: $WORK/train.en") and [e["made"] for e in kept] == ["data/bbb"]
    shutil.rmtree(tmp_path / "data" / "bbb")  # its folder removed by hand (or pruned): made again
    assert per_setting_state(str(record), b, work)[0] == NOT_DONE


def test_the_same_data_from_other_settings_is_one_folder_accepting_both(tmp_path):
    from test_recipes import steps
    work = tmp_path / "work"
    (tmp_path / "train.en").write_text("a b\nc d e\n")
    (tmp_path / "test.de").write_text("x y\n")

    def prepare(clean):
        tmp = work / "data" / "binarise.tmp"
        os.makedirs(tmp / "raw")
        (tmp / "dict.en.txt").write_text("a 1\n")
        (tmp / "raw" / "test.de").write_text("x y\n")
        p = steps("prepare-record", "--data", str(tmp), "--set", "SRC=en", "--set", "TGT=de", "--set", f"CLEAN={clean}",
                  "--raw-train", str(tmp_path / "train.en"), "--clean-train", str(tmp_path / "train.en"),
                  "--test-ref", str(tmp / "raw" / "test.de"))
        assert p.returncode == 0, p.stderr
        p = steps("data-place", "--tmp", str(tmp), "--work", str(work))
        assert p.returncode == 0 and not tmp.exists(), p.stderr
        return p

    prepare("1-250")
    p = prepare("1-300")  # other settings, byte-identical data: the same data_id, one folder
    (folder,) = os.listdir(work / "data")
    assert "also_prepared_as" in p.stdout and os.readlink(work / "data-bin") == os.path.join("data", folder)
    rec = json.load(open(work / "data" / folder / "prepare.json"))
    assert rec["settings"]["CLEAN"] == "1-250" and [w["settings"]["CLEAN"] for w in rec["also_prepared_as"]] == ["1-300"]
    for clean, ok in (("1-250", True), ("1-300", True), ("1-200", False)):
        p = steps("check-data", "--data", str(work / "data-bin"), "--set", "SRC=en", "--set", "TGT=de",
                  "--set", f"CLEAN={clean}", "--print-pairs")
        assert (p.returncode == 0) == ok, p.stderr
        if ok:
            assert json.loads(p.stdout)["prepare_settings"]["CLEAN"] == clean
        else:
            assert "CLEAN='1-250' there, CLEAN='1-200' here" in p.stderr

    # a run folder: a node other than node 0 (--no-record) checks it and writes nothing; node 0
    # records the data; then a record of other data is refused with and without --no-record
    run_dir = tmp_path / "run"
    check = ("check-data", "--data", str(work / "data-bin"), "--set", "SRC=en", "--set", "TGT=de",
             "--set", "CLEAN=1-250", "--run-dir", str(run_dir))
    p = steps(*check, "--no-record")
    assert p.returncode == 0 and not (run_dir / "data.json").exists(), p.stderr
    p = steps(*check)
    assert p.returncode == 0 and json.load(open(run_dir / "data.json"))["data_id"] == rec["data_id"], p.stderr
    json.dump({"data": str(tmp_path / "other"), "data_id": "f" * 64, "settings": {}}, open(run_dir / "data.json", "w"))
    for extra in ((), ("--no-record",)):
        p = steps(*check, *extra)
        assert p.returncode == 1 and f"SAVE_DIR={run_dir} holds a run trained on" in p.stderr, p.stderr

    # the folder changed by hand (its record says other data): moved aside whole, never deleted
    json.dump({**rec, "data_id": "changed-by-hand"}, open(work / "data" / folder / "prepare.json", "w"))
    (work / "data" / folder / "notes.txt").write_text("mine\n")
    p = prepare("1-250")
    assert f"moved to {work / 'data' / folder}.changed" in p.stderr
    assert (work / "data" / f"{folder}.changed" / "notes.txt").read_text() == "mine\n"
    assert json.load(open(work / "data" / folder / "prepare.json"))["settings"]["CLEAN"] == "1-250"


def test_a_gone_registration_keeps_its_data_until_forgotten(tmp_path):
    """data-list / data-prune / data-register / data-forget on made-up folders: a registered run
    that is gone keeps the data it named (a registration of an older train.sh, without its data,
    keeps every folder); forgetting it lets prune show the data; a moved run registered again
    keeps it."""
    from test_recipes import steps

    work = tmp_path / "work"
    folders = {}
    for name in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):
        folder = work / "data" / name
        os.makedirs(folder)
        (folder / "prepare.json").write_text(json.dumps({"data_id": name + "0" * 52, "settings": {"SRC": "en"}}))
        folders[name] = str(folder)

    def run_on(run, name):
        os.makedirs(run)
        (run / "run.json").write_text(json.dumps({"data": {"path": folders[name], "data_id": name + "0" * 52}}))
        return os.path.realpath(run)

    old = run_on(tmp_path / "x" / "run", "aaaaaaaaaaaa")
    legacy = str(tmp_path / "x" / "legacy")  # a plain line, as an older train.sh wrote it
    assert steps("register-run", "--work", str(work), "--run-dir", old).returncode == 0
    with open(work / "runs.index", "a") as f:
        f.write(legacy + "\n")
    assert json.loads((work / "runs.index").read_text().splitlines()[0]) == {  # its data, from its record
        "run": old, "data_id": "aaaaaaaaaaaa" + "0" * 52, "data": "data/aaaaaaaaaaaa"}  # (in WORK: relative to it)

    def prune(*extra):
        p = steps("data-prune", str(work), *extra)
        assert p.returncode == 0, p.stderr
        return p.stdout

    new = str(tmp_path / "x" / "moved")
    os.rename(old, new)
    out = prune("--yes")  # the legacy registration is gone too: its data unknown, every folder kept
    assert "0 unreferenced data folder(s) removed" in out and all(os.path.isdir(f) for f in folders.values()), out
    assert f"registered run {old}: gone" in out and f"its data {folders['aaaaaaaaaaaa']} (data_id aaaaaaaaaaaa) is kept" in out
    assert f"registered run {legacy}: gone" in out and "every data folder is kept" in out
    assert steps("data-forget", str(work), legacy).returncode == 0
    out = prune()
    assert f"would remove {folders['bbbbbbbbbbbb']} (" in out and f"would remove {folders['aaaaaaaaaaaa']}" not in out, out
    assert "kept aaaaaaaaaaaa " in out and out.splitlines()[0].endswith(f"referenced by: {old} (gone)"), out
    p = steps("data-register", str(work), new)
    assert p.returncode == 0 and f"'data.sh forget {old}'" in p.stdout, p.stderr
    out = prune("--yes", "--forget-gone")
    assert f"forgot registered run {old}" in out and f"removed {folders['bbbbbbbbbbbb']} (" in out, out
    assert os.path.isdir(folders["aaaaaaaaaaaa"]) and not os.path.exists(folders["bbbbbbbbbbbb"])
    assert [json.loads(line)["run"] for line in (work / "runs.index").read_text().splitlines()] == [os.path.realpath(new)]
    # a run whose data is not in this WORK is not registered here
    elsewhere = tmp_path / "elsewhere"
    os.makedirs(elsewhere)
    (elsewhere / "run.json").write_text(json.dumps({"data": {"path": "/nowhere", "data_id": "c" * 64}}))
    p = steps("data-register", str(work), str(elsewhere))
    assert p.returncode == 1 and "is not in" in p.stderr and "register it in the WORK that holds its data" in p.stderr
