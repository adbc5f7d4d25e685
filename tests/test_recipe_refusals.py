"""Nothing lost, no dead ends: every recipe script refuses an argument it does not know before doing
anything; data.sh prune shows and removes only with --yes; a run outside WORK keeps its data; a
refused model flag leaves nothing that blocks its correction; a mistyped flag is one line naming
the nearest known one. Real recipe runs on the tiny corpora of test_recipes."""

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_recipes import RECIPES, TINY_MODEL, prepared_ende, run, trained_ende  # noqa: E402

#: every script of every recipe (env.sh is sourced by the others)
SCRIPTS = {recipe: tuple(sorted(n for n in os.listdir(os.path.join(RECIPES, recipe)) if n.endswith(".sh") and n != "env.sh"))
           for recipe in sorted(os.listdir(RECIPES)) if os.path.isfile(os.path.join(RECIPES, recipe, "env.sh"))}


def script(recipe, name, *args, env=None, check=True):
    full = dict(os.environ, PYTHON=sys.executable)
    full.update(env or {})
    full["PATH"] = os.path.dirname(sys.executable) + os.pathsep + full["PATH"]
    p = subprocess.run(["bash", os.path.join(RECIPES, recipe, name), *args], env=full, capture_output=True, text=True)
    assert p.returncode == 0 or not check, p.stderr
    return p


def error_lines(p):
    """The error lines of a recipe script (the training step's are on stdout, as its log)."""
    return [line for line in (p.stdout + p.stderr).splitlines() if line.startswith("error: ")]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_data_sh_refuses_an_unknown_or_contradicting_argument_before_doing_anything(tmp_path):
    """(Every script's unknown argument, --dry-run, refused in one line with nothing made: the
    usage errors of test_exit_codes, run for every script found here.)"""
    assert "sweep.sh" in SCRIPTS["bible_grc_en"] and "figure3.sh" in SCRIPTS["wmt14_en_de"] and len(SCRIPTS) == 4
    for args, said in ((("prune", "-y"), "unknown argument '-y'"), (("prune", "--yes", "--dry-run"), "contradict"),
                       (("purge",), "unknown action")):
        p = script("wmt14_en_de", "data.sh", *args, env={"WORK": str(tmp_path / "w")}, check=False)
        assert p.returncode == (1 if said == "contradict" else 2) and len(p.stderr.splitlines()) == 1 and said in p.stderr, p.stderr


def test_an_interpreter_without_torch_is_refused_in_one_line_before_any_step(tmp_path):
    # the venv's own python without its site-packages: no torch, no fairseq
    bare = tmp_path / "python-bare"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    for recipe in SCRIPTS:
        work = tmp_path / recipe
        p = script(recipe, "lengths.sh", env={"WORK": str(work), "PYTHON": str(bare)}, check=False)
        assert p.returncode == 1 and len(p.stderr.splitlines()) == 1, p.stderr
        assert f"PYTHON={bare} cannot import torch fairseq" in p.stderr, p.stderr
        assert not work.exists()


def test_without_python_given_the_recipes_use_the_project_venv(tmp_path):
    venv_python = os.path.join(os.path.dirname(RECIPES), ".venv", "bin", "python")
    if not os.access(venv_python, os.X_OK):
        pytest.skip("no .venv in this checkout (scripts/test.sh makes it)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(d for d in env["PATH"].split(os.pathsep) if not d.startswith(os.path.dirname(venv_python)))
    env["WORK"] = str(tmp_path / "w")
    p = subprocess.run(["bash", os.path.join(RECIPES, "bible_grc_en", "train.sh"), "--dry-run"], env=env,
                       capture_output=True, text=True)
    # the interpreter check passed (the .venv has everything); the unknown argument is what is refused
    assert p.returncode == 2 and "unknown argument '--dry-run'" in p.stderr and "cannot import" not in p.stderr, p.stderr


@pytest.mark.e2e
def test_prune_shows_then_removes_only_with_yes_and_sees_runs_outside_work(tmp_path):
    env = prepared_ende(tmp_path / "work")
    work = env["WORK"]
    first = os.path.realpath(os.path.join(work, "data-bin"))
    rec = json.load(open(os.path.join(first, "prepare.json")))
    # the data's record names the files it was given: path, size, sha256
    given = {i["name"]: i for i in rec["inputs"]}
    assert set(given) == {f"{s}_{side}" for s in ("TRAIN", "VALID", "TEST") for side in ("SRC", "TGT")}
    for name, i in given.items():  # (the shared WORK was prepared in a folder renamed after)
        assert os.path.basename(i["path"]) == os.path.basename(env[name]) and i["bytes"] == os.path.getsize(env[name])
        assert i["sha256"] == sha256(env[name])

    # 4. a refused flag writes no record: its correction in the same folder trains
    outside = str(tmp_path / "elsewhere" / "csan2d")
    train = dict(env, ARCH="transformer_csan2d_wmt_en_de", SAVE_DIR=outside, MAX_UPDATE="2")
    base_args = f"{TINY_MODEL} --csan-layers 0"
    for bad, named in (("--csan-window 0", "--csan-window"), ("--relpos-k 4", "--relpos-k")):
        p = run("wmt14_en_de", "train.sh", dict(train, MODEL_ARGS=f"{base_args} {bad}"), check=False)
        assert p.returncode == 1 and named in error_lines(p)[0], p.stdout + p.stderr
        assert not os.path.exists(os.path.join(outside, "run.json")), "a refused run left its record"
        assert "Re-running resumes" not in p.stderr
    p = run("wmt14_en_de", "train.sh", dict(train, MODEL_ARGS=f"{base_args} --csan-window 3"))
    assert json.load(open(os.path.join(outside, "run.json")))["model"]["csan_window"] == 3
    assert os.path.isfile(os.path.join(outside, "checkpoint_last.pt"))

    # a start that fails before its first save (a batch that holds no sentence): no advice to
    # resume from a checkpoint that does not exist; its record is no run yet, replaced by the next
    elsewhere2 = str(tmp_path / "elsewhere" / "killed")
    p = run("wmt14_en_de", "train.sh", dict(train, SAVE_DIR=elsewhere2, MAX_TOKENS="1",
                                              MODEL_ARGS=f"{base_args} --csan-window 3"), check=False)
    assert p.returncode == 1 and os.path.isfile(os.path.join(elsewhere2, "run.json")), p.stderr
    assert "before saving a checkpoint" in p.stderr and "Re-running resumes" not in p.stderr
    p = run("wmt14_en_de", "train.sh", dict(train, SAVE_DIR=elsewhere2, MODEL_ARGS=f"{base_args} --csan-window 3"))
    said = p.stdout + p.stderr  # the training step's output is its log, on stdout
    assert "recorded a start that saved no checkpoint and finished no training" in said
    assert "max_tokens: 1 recorded, 400 now" in said and "replaced by this run" in said
    assert json.load(open(os.path.join(elsewhere2, "run.json")))["training"]["max_tokens"] == 400

    # another preparation: the first data is named only by the runs outside WORK (registered)
    run("wmt14_en_de", "prepare.sh", dict(env, BPE_MERGES="40"))
    second = os.path.realpath(os.path.join(work, "data-bin"))
    assert second != first
    index = [json.loads(line) for line in open(os.path.join(work, "runs.index")).read().splitlines()]
    assert index == [{"run": os.path.realpath(run_dir), "data_id": rec["data_id"],
                      "data": os.path.relpath(first, os.path.realpath(work))}  # a folder in WORK: relative to it
                     for run_dir in (outside, elsewhere2)]  # each with the data it trains on
    # an unreferenced folder: a copy of the second data under another id
    stray = os.path.join(work, "data", "0123456789ab")
    shutil.copytree(second, stray)
    stray_rec = json.load(open(os.path.join(stray, "prepare.json")))
    stray_rec["data_id"] = "0123456789ab" + "0" * 52
    json.dump(stray_rec, open(os.path.join(stray, "prepare.json"), "w"))

    listing = script("wmt14_en_de", "data.sh", "list", env=env).stdout
    line = [row for row in listing.splitlines() if row.startswith(os.path.basename(first))][0]
    assert os.path.realpath(outside) in line and os.path.realpath(elsewhere2) in line
    assert f"TRAIN_SRC={given['TRAIN_SRC']['path']}" in line and given["TRAIN_SRC"]["sha256"][:12] in line

    before = sorted(os.listdir(os.path.join(work, "data")))
    for args in (("prune",), ("prune", "--dry-run")):
        p = script("wmt14_en_de", "data.sh", *args, env=env)
        assert f"would remove {stray} (" in p.stdout and "nothing was removed" in p.stdout, p.stdout
        assert "is named by none of the 2 run record(s)" in p.stdout
        assert sorted(os.listdir(os.path.join(work, "data"))) == before
    p = script("wmt14_en_de", "data.sh", "prune", "--yes", env=env)
    assert f"removed {stray} (" in p.stdout and "1 unreferenced data folder(s) removed" in p.stdout
    assert not os.path.exists(stray) and os.path.isdir(first) and os.path.isdir(second)

    # the run's data folder gone: the advice to prepare again names the files it was made from
    os.rename(first, first + ".aside")
    p = run("wmt14_en_de", "evaluate.sh", dict(env, ARCH="transformer_csan2d_wmt_en_de", SAVE_DIR=outside), check=False)
    assert p.returncode == 1 and "re-run prepare.sh with the settings it was prepared with" in error_lines(p)[0]
    assert f"TRAIN_SRC={given['TRAIN_SRC']['path']}" in error_lines(p)[0], p.stderr
    from test_prepare_refusals import named_variables, settable_variables
    hint = error_lines(p)[0]  # only variables a user can set: the cleaning as CLEAN_MIN/MAX/RATIO
    assert "CLEAN_MAX=250 CLEAN_MIN=1 CLEAN_RATIO=1.5 " in hint and "CLEAN=" not in hint
    assert named_variables(hint) <= settable_variables(), named_variables(hint) - settable_variables()
    os.rename(first + ".aside", first)

    # registered runs removed: listed as gone, their data kept until the user says they were removed
    shutil.rmtree(tmp_path / "elsewhere")
    listing = script("wmt14_en_de", "data.sh", "list", env=env).stdout
    assert f"registered run {os.path.realpath(outside)}: gone" in listing
    p = script("wmt14_en_de", "data.sh", "prune", "--yes", env=env)
    assert f"kept {os.path.basename(first)} " in p.stdout and os.path.isdir(first), p.stdout
    p = script("wmt14_en_de", "data.sh", "prune", "--forget-gone", env=env)
    assert f"would forget registered run {os.path.realpath(outside)}: gone" in p.stdout
    assert f"would remove {first} (" in p.stdout and os.path.isdir(first), p.stdout
    assert "'data.sh prune --yes --forget-gone' removes them" in p.stdout
    assert len(open(os.path.join(work, "runs.index")).read().splitlines()) == 2  # a dry run forgets nothing
    p = script("wmt14_en_de", "data.sh", "prune", "--yes", "--forget-gone", env=env)
    assert f"forgot registered run {os.path.realpath(outside)}" in p.stdout and f"removed {first} (" in p.stdout
    assert not os.path.exists(first) and open(os.path.join(work, "runs.index")).read() == ""


def data_sh(*args, env):
    return script("wmt14_en_de", "data.sh", *args, env=env, check=False)


@pytest.mark.e2e
@pytest.mark.xdist_group("ende_trained_run")  # starts from trained_ende (test_copies, test_evaluation_reuse...)
def test_a_moved_run_keeps_its_data_and_evaluates_at_its_new_place(tmp_path):
    env = trained_ende(tmp_path / "work")  # a run trained to update 4 (and evaluated) in WORK/runs
    work = env["WORK"]
    first = os.path.realpath(os.path.join(work, "data-bin"))
    old = str(tmp_path / "x" / "runA")
    os.makedirs(os.path.dirname(old))
    # moved outside WORK, as data.sh list advises: its new place registered, its old one (evaluate.sh registered it) forgotten
    os.rename(os.path.join(work, "runs", "transformer_attn_wmt_en_de"), old)
    for args in (("register", old), ("forget", os.path.join(work, "runs", "transformer_attn_wmt_en_de"))):
        assert data_sh(*args, env=env).returncode == 0
    run("wmt14_en_de", "prepare.sh", dict(env, BPE_MERGES="40"))  # data-bin names other data now
    old = os.path.realpath(old)
    new = os.path.join(os.path.dirname(old), "runA-2")
    os.rename(old, new)  # housekeeping: the run renamed

    listing = data_sh("list", env=env).stdout
    gone = [line for line in listing.splitlines() if line.startswith(f"registered run {old}: gone")]
    assert len(gone) == 1 and f"its data {first} (data_id {os.path.basename(first)}) is kept" in gone[0], listing
    assert "'data.sh register NEW_PLACE' (or train.sh with SAVE_DIR=NEW_PLACE)" in gone[0]
    assert f"'data.sh forget {old}'" in gone[0]
    row = [line for line in listing.splitlines() if line.startswith(os.path.basename(first))][0]
    assert row.endswith(f"referenced by: {old} (gone)"), row
    p = data_sh("prune", "--yes", env=env)
    assert p.returncode == 0 and "0 unreferenced data folder(s) removed" in p.stdout and os.path.isdir(first), p.stdout

    # an ARCH other than the run's (its record's, not its folder's name): refused, the record left as it was
    def written():  # the run folder's files and their sha256 (the record, the evaluation it holds...)
        return {os.path.join(d, f): sha256(os.path.join(d, f)) for d, _, fs in os.walk(new) for f in fs}
    before = written()
    p = run("wmt14_en_de", "evaluate.sh", dict(env, SAVE_DIR=new, ARCH="transformer_csan2d_wmt_en_de"), check=False)
    assert p.returncode == 1 and error_lines(p) == [
        f"error: ARCH=transformer_csan2d_wmt_en_de: SAVE_DIR={new} holds a run trained as "
        f"ARCH=transformer_attn_wmt_en_de (its run record {new}/run.json): leave ARCH unset (evaluate.sh takes the "
        f"run's) or give ARCH=transformer_attn_wmt_en_de; to evaluate a transformer_csan2d_wmt_en_de run, give its "
        f"SAVE_DIR"], p.stderr
    assert written() == before  # nothing written: no record change, no evaluation output (test.tmp...)
    # the moved run evaluates on its own data at its new place (N_AVG=1: not the evaluation it holds)
    p = run("wmt14_en_de", "evaluate.sh", dict(env, SAVE_DIR=new, N_AVG="1"))
    assert f"data: {first} (the run's own" in p.stderr and f"{new}/test: evaluated again: N_AVG: '2' -> '1'" in p.stderr
    assert json.load(open(os.path.join(new, "run.json")))["evaluations"]["test"]["ref"] == os.path.join(first, "raw", "test.de")

    # re-running train.sh at the new place, the data-bin naming other data: one error, with the fix (the run's
    # data, and the settings it was prepared with where they differ from the ones given)
    bin_, second = os.path.join(work, "data-bin"), os.path.realpath(os.path.join(work, "data-bin"))
    for given, fix in (({}, f"give DATA={first};"), ({"BPE_MERGES": "40"}, f"give DATA={first} with BPE_MERGES=60;")):
        p = run("wmt14_en_de", "train.sh", dict(env, SAVE_DIR=new, MAX_UPDATE="4", **given), check=False)
        assert p.returncode == 1 and len(p.stderr.splitlines()) == 1, p.stderr
        assert p.stderr == (f"error: SAVE_DIR={new} holds a run trained on {first} (data_id {os.path.basename(first)}), "
                            f"not on {bin_} (data_id {os.path.basename(second)}): to continue it, {fix} to train a new "
                            f"run on {bin_}, give another SAVE_DIR\n"), p.stderr
    # re-running train.sh with SAVE_DIR=<new place>: nothing trained, the new place registered
    p = run("wmt14_en_de", "train.sh", dict(env, SAVE_DIR=new, MAX_UPDATE="4", DATA=first))
    assert "trained before to MAX_UPDATE=4" in p.stdout + p.stderr, p.stderr[-2000:]
    assert [json.loads(line)["run"] for line in open(os.path.join(work, "runs.index")).read().splitlines()] == [old, new]
    os.rename(new, new + "b")  # moved once more: registered by data.sh register
    new += "b"

    # its new place registered, the old registrations forgotten: the new place keeps the data
    for args, said in ((("register", str(tmp_path / "nowhere")), "no such folder"),
                       (("register", str(tmp_path)), "no run record there"),
                       (("forget", new), "the folder exists"), (("forget", str(tmp_path / "y")), "not registered"),
                       (("forget",), "give one run folder"), (("register", new, new), "give one run folder")):
        p = data_sh(*args, env=env)
        assert p.returncode == (2 if said == "give one run folder" else 1), (args, p.stderr)  # usage: 2
        assert len(p.stderr.splitlines()) == 1 and said in p.stderr, (args, p.stderr)
    p = data_sh("register", new, env=env)
    assert p.returncode == 0 and f"{new}: registered in" in p.stdout and f"'data.sh forget {old}'" in p.stdout, p.stderr
    for gone in (old, new[:-1]):
        p = data_sh("forget", gone, env=env)
        assert p.returncode == 0 and f"forgot registered run {gone}" in p.stdout, p.stderr
    index = [json.loads(line)["run"] for line in open(os.path.join(work, "runs.index")).read().splitlines()]
    assert index == [new]
    listing = data_sh("list", env=env).stdout
    assert "gone" not in listing and f"referenced by: {new}" in listing, listing

    # moved into WORK: found there without a registration; removed: its data pruned
    inside = os.path.join(work, "runs", "runA")
    os.makedirs(os.path.dirname(inside), exist_ok=True)  # WORK/runs: where the run was trained
    os.rename(new, inside)
    p = data_sh("prune", "--yes", "--forget-gone", env=env)
    assert f"forgot registered run {new}" in p.stdout and os.path.isdir(first), p.stdout
    assert [line for line in p.stdout.splitlines() if line.startswith(f"kept {os.path.basename(first)} ")][0].endswith(
        "referenced by: runs/runA")
    shutil.rmtree(inside)
    p = data_sh("prune", "--yes", env=env)
    assert f"removed {first} (" in p.stdout and not os.path.exists(first), p.stdout


@pytest.mark.e2e
def test_a_data_folder_of_another_work_trains_and_that_work_keeps_it(tmp_path):
    env = prepared_ende(tmp_path / "work")
    work = env["WORK"]
    first = os.path.realpath(os.path.join(work, "data-bin"))
    save = os.path.realpath(str(tmp_path / "run"))
    other = str(tmp_path / "other work")  # never prepared: the data carries its own record
    p = run("wmt14_en_de", "train.sh", dict(env, WORK=other, DATA=first, SAVE_DIR=save, MAX_UPDATE="2"))
    assert f"{save}: registered in {os.path.join(work, 'runs.index')} too" in p.stderr, p.stderr
    assert json.load(open(os.path.join(save, "run.json")))["data"]["path"] == first
    os.remove(os.path.join(work, "data-bin"))  # nothing but the run names the data now
    listing = script("wmt14_en_de", "data.sh", "list", env=env).stdout
    assert f"referenced by: {save}" in listing, listing
    p = script("wmt14_en_de", "data.sh", "prune", "--yes", env=env)
    assert "0 unreferenced data folder(s) removed" in p.stdout and os.path.isdir(first), p.stdout


@pytest.mark.e2e
def test_a_mistyped_model_flag_is_one_line_naming_the_nearest(tmp_path):
    env = prepared_ende(tmp_path / "work")
    save = str(tmp_path / "run")
    p = run("wmt14_en_de", "train.sh", dict(env, ARCH="transformer_csan2d_wmt_en_de", SAVE_DIR=save, MAX_UPDATE="2",
                                              MODEL_ARGS=f"{TINY_MODEL} --csan-layers 0",
                                              EXTRA_ARGS="--csan-windw 3 --bogus-flag 1"), check=False)
    assert p.returncode == 1
    said = [line for line in (p.stdout + p.stderr).splitlines()
            if not line.startswith("[wmt14_en_de ") and not line.startswith("$ ")]
    assert len(said) <= 3, said
    # the variable that gave the flags named, each flag with the nearest flags of the architecture (none near
    # --bogus-flag: not fairseq's --log-file)
    assert said[0] == ("error: EXTRA_ARGS='--csan-windw 3 --bogus-flag 1': fairseq-train with "
                       "ARCH=transformer_csan2d_wmt_en_de has no flag --csan-windw (did you mean --csan-window?) nor "
                       "--bogus-flag (no flag is near it) (fairseq-attn-pieces --arch transformer_csan2d_wmt_en_de "
                       "lists the model's flags, fairseq-train --help the others)"), said
    assert "usage:" not in p.stdout + p.stderr
    assert not os.path.exists(os.path.join(save, "run.json"))
    # fairseq-train itself, with the plugin as --user-dir, on the same data: the same line
    plugin = os.path.join(os.path.dirname(RECIPES), "fairseq_attn_plugins")
    q = subprocess.run([os.path.join(os.path.dirname(sys.executable), "fairseq-train"), os.path.join(env["WORK"], "data-bin"),
                        "--user-dir", plugin, "--arch", "transformer_csan2d_wmt_en_de", "--csan-windw", "3",
                        "--task", "translation", "--save-dir", str(tmp_path / "ft")], capture_output=True, text=True)
    said = [line for line in q.stderr.splitlines() if "tensorboardX" not in line]
    assert q.returncode == 2 and len(said) == 1 and "did you mean --csan-window?" in said[0], q.stderr
    assert "(fairseq-attn-pieces --arch transformer_csan2d_wmt_en_de lists its flags)" in said[0], said


@pytest.mark.e2e  # prepare.sh runs fairseq-preprocess (the copied WORK is prepared again at its own path)
def test_a_second_prepare_in_the_same_work_is_refused_while_the_first_runs(tmp_path):
    """raw/, tok/ and bpe/ serve every preparation of a WORK: a prepare.sh started while another
    runs there is refused in one line and touches nothing; once the first ends, it runs."""
    import fcntl

    env = prepared_ende(tmp_path / "work")
    work = env["WORK"]
    def files():  # every file of WORK and when it was written (the lock file aside)
        return {os.path.join(d, f): os.path.getmtime(os.path.join(d, f))
                for d, _, fs in os.walk(work) for f in fs if f != ".prepare.lock"}

    before = files()
    with open(os.path.join(work, ".prepare.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running prepare.sh holds it
        p = run("wmt14_en_de", "prepare.sh", env, check=False)
        assert p.returncode == 1, p.stderr
        assert error_lines(p) == [f"error: WORK={work}: another prepare.sh is running there (it holds "
                                  f"{work}/.prepare.lock); wait for it to end, or give this one another WORK"]
        assert files() == before
    run("wmt14_en_de", "prepare.sh", env)  # the lock released: the same command runs
    # a study prepares, then trains in the same process: the lock ends with the preparation (the
    # settings of the run above: every step done before, the lock taken and released all the same)
    study = tmp_path / "study.sh"
    study.write_text(f'. "{RECIPES}/wmt14_en_de/env.sh"\nprepare_main\n'
                     f'flock -n "$WORK/.prepare.lock" true && echo "lock free"\n')
    p = subprocess.run(["bash", str(study)], env=dict(os.environ, PYTHON=sys.executable, BPE_MERGES="60", WORKERS="1",
                                                      **env), capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip().endswith("lock free"), p.stdout + p.stderr
    assert "binarise: done before, skipped" in p.stderr, p.stderr


@pytest.mark.parametrize("given, said", [
    ({"CURVE": "1000,500"}, "CURVE=1000,500: give the updates in increasing order"),
    ({"CONVERGE": "0"}, "CONVERGE=0: give the patience"),
    ({"ARCHS": "baseline,relpoz"}, "ARCHS=baseline,relpoz: 'relpoz' is transformer_relpoz_wmt_en_de, not a registered"),
    ({"ARCHS": "baseline"}, "ARCHS=baseline: the study compares systems with the first one"),
    ({"CONCAT": "1,1"}, "CONCAT=1,1: 1 is given twice"),
    ({"TRAIN_CONCAT": "1"}, "TRAIN_CONCAT=1: give how many training pairs are joined"),
    ({"SEEDS": "2 2"}, 'SEEDS="2 2": seed 2 is given twice'),
    ({"TEST_DOCS": "@DOCS@"}, "TEST_DOCS=@DOCS@: 7 lines, but the test source"),
])
def test_a_refused_study_setting_writes_nothing_not_even_the_quick_corpus(tmp_path, given, said):
    """lengths.sh with QUICK=1: every setting is checked before the toy corpus is written (WORK stays
    unmade); the error names the variable the user set (ARCHS, not the ARCH it makes)."""
    docs = tmp_path / "docs.txt"
    docs.write_text("d\n" * 7)
    given = {k: v.replace("@DOCS@", str(docs)) for k, v in given.items()}
    work = tmp_path / "work"
    p = script("bible_grc_en", "lengths.sh", env=dict(given, WORK=str(work), QUICK="1", QUICK_SIZES="train=30,valid=5,test=12"),
               check=False)
    assert p.returncode == 1 and len(error_lines(p)) == 1 and error_lines(p)[0].startswith("error: " + said.replace("@DOCS@", str(docs))), p.stderr
    assert not work.exists()


def test_help_of_a_study_names_the_variable_it_reads(tmp_path):
    p = script("bible_grc_en", "lengths.sh", "--help", env={"WORK": str(tmp_path / "w")}, check=False)
    assert p.returncode == 2 and "e.g. ARCHS=baseline,relpos lengths.sh" in p.stderr and "ARCH=..." not in p.stderr, p.stderr
    p = script("bible_grc_en", "train.sh", "--help", env={"WORK": str(tmp_path / "w")}, check=False)
    assert p.returncode == 2 and "e.g. ARCH=... train.sh" in p.stderr, p.stderr


def test_evaluate_takes_the_architecture_of_the_run_record_never_its_folder_name(tmp_path):
    """run-arch: the run record's architecture, whatever the folder is called; another one given is
    refused naming both; a record without one (never trained) keeps the ARCH given, else the default."""
    from fairseq_attn_records import run_record
    folder = tmp_path / "transformer_attn_wmt_en_de"  # the default run's folder name, holding a relpos run
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"format": run_record.FORMAT, "arch": "transformer_relpos_wmt_en_de"}))

    def run_arch(*args):
        """The step in this process: (exit status, stdout, stderr), as subprocess.run would give them."""
        import argparse
        import contextlib
        import io

        from fairseq_attn_recipes import evaluations
        sub = argparse.ArgumentParser().add_subparsers()
        evaluations.add_parsers(sub)
        ns = sub.choices["run-arch"].parse_args(["--run-dir", str(folder), "--default", "transformer_attn_wmt_en_de", *args])
        out, err, code = io.StringIO(), io.StringIO(), 0
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                ns.fn(ns)
            except SystemExit as e:
                code = e.code
        return subprocess.CompletedProcess([], code, out.getvalue(), err.getvalue())
    for given in ((), ("--given", ""), ("--given", "transformer_relpos_wmt_en_de")):
        p = run_arch(*given)
        assert (p.returncode, p.stdout, p.stderr) == (0, "transformer_relpos_wmt_en_de\n", ""), p.stderr
    p = run_arch("--given", "transformer_csan2d_wmt_en_de")
    assert p.returncode == 1 and p.stdout == "" and p.stderr.startswith(
        f"error: ARCH=transformer_csan2d_wmt_en_de: SAVE_DIR={folder} holds a run trained as "
        "ARCH=transformer_relpos_wmt_en_de (its run record"), p.stderr
    (folder / "run.json").write_text(json.dumps({"format": run_record.FORMAT}))
    assert run_arch("--given", "transformer_rope_wmt_en_de").stdout == "transformer_rope_wmt_en_de\n"
    assert run_arch().stdout == "transformer_attn_wmt_en_de\n"


def test_a_run_of_a_copied_work_is_sent_to_that_works_own_data(tmp_path, capsys):
    """train.sh's refusal of a run trained on other data than the data-bin (check-data) names the run's
    data in this WORK (WORK/data/<id>, as evaluate.sh reads it) where the folder it was trained on is
    gone: a WORK copied or moved with its runs holds the data they were trained on."""
    from fairseq_attn_recipes.fingerprints import refuse_other_run_data
    work = tmp_path / "copy"
    ids = {"run": "a" * 64, "latest": "b" * 64}
    for data_id in ids.values():
        (work / "data" / data_id[:12]).mkdir(parents=True)
        (work / "data" / data_id[:12] / "prepare.json").write_text(json.dumps({"data_id": data_id}))
    os.symlink(os.path.join("data", ids["latest"][:12]), work / "data-bin")
    run_dir = work / "runs" / "r"
    run_dir.mkdir(parents=True)
    gone = str(tmp_path / "original" / "data" / ids["run"][:12])  # where it was trained: moved away since
    (run_dir / "run.json").write_text(json.dumps({"data": {"path": gone, "data_id": ids["run"], "settings": {}}}))
    with pytest.raises(SystemExit) as e:
        refuse_other_run_data(str(run_dir), str(work / "data-bin"), ids["latest"], {})
    own = os.path.realpath(work / "data" / ids["run"][:12])
    assert e.value.code == 1 and capsys.readouterr().err == (
        f"error: SAVE_DIR={run_dir} holds a run trained on {own} (data_id aaaaaaaaaaaa), not on {work}/data-bin "
        f"(data_id bbbbbbbbbbbb): to continue it, give DATA={own}; to train a new run on {work}/data-bin, give "
        f"another SAVE_DIR\n")
    os.rename(own, own + ".aside")  # nowhere: the advice to prepare it again
    with pytest.raises(SystemExit):
        refuse_other_run_data(str(run_dir), str(work / "data-bin"), ids["latest"], {})
    err = capsys.readouterr().err
    assert f"trained on {gone} (data_id aaaaaaaaaaaa)" in err and "that folder no longer exists: " in err
