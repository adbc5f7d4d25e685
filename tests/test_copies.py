"""Copies and moves of a WORK and of a run: a WORK copied (``cp -a``) reuses every step and its
runs read its own data; a run copied (``cp -r``: new file times) is evaluated again only when what
it evaluates changed, the change named; a copy trained further is a run of its own; evaluate.sh
registers the run it evaluates. The end-to-end tests start from the run trained once per test
run (:func:`test_recipes.trained_ende`); only a copy trained further trains (one update). Records
of an older recipe naming files by absolute paths: read here without a recipe."""

import json
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_evaluation_reuse import no_generate  # noqa: E402
from test_recipes import RECIPES, run, trained_ende  # noqa: E402

from fairseq_attn_recipes import databins, evaluations  # noqa: E402
from fairseq_attn_recipes.fingerprints import CHANGED, SAME, file_digest, fingerprint, stage_state  # noqa: E402

# one pytest-xdist worker runs the tests that start from the trained run (test_evaluation_reuse's
# and every other test starting from trained_ende too): the others never wait while it is made
TRAINED_RUN = pytest.mark.xdist_group("ende_trained_run")
RUN = os.path.join("runs", "transformer_attn_wmt_en_de")  # train.sh's default SAVE_DIR in WORK
STAGES = ("raw", "tok.en", "tok.de", "bpe.learn", "bpe.en", "bpe.de", "clean", "binarise")


def record(run_dir):
    return json.load(open(os.path.join(run_dir, "run.json")))


def cp(*args):
    subprocess.run(["cp", *args], check=True)


def data_sh(env, *action):
    full = dict(os.environ, PYTHON=sys.executable, **env)
    p = subprocess.run(["bash", os.path.join(RECIPES, "wmt14_en_de", "data.sh"), *action], env=full,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


# ------------------------------------------------------------------ a WORK copied
@pytest.mark.e2e
@TRAINED_RUN
def test_a_copied_work_reuses_every_step_and_evaluates_on_its_own_data(tmp_path):
    env = trained_ende(tmp_path / "a" / "work")
    copy = str(tmp_path / "b" / "work")
    os.makedirs(os.path.dirname(copy))
    cp("-a", env["WORK"], copy)
    shutil.move(env["WORK"], str(tmp_path / "a" / "moved away"))  # the copy needs nothing of the original
    b = dict(env, WORK=copy)
    p = run("wmt14_en_de", "prepare.sh", b)
    for stage in STAGES:
        assert f"] {stage}: done before, skipped (same settings and inputs)" in p.stderr, p.stderr[-3000:]
    assert "redone" not in p.stderr
    own = os.path.realpath(os.path.join(copy, "data-bin"))
    assert own.startswith(os.path.realpath(copy) + os.sep)
    # its run: evaluated on the copy's data folder, and that evaluation is the one it holds
    p = run("wmt14_en_de", "evaluate.sh", dict(b, PYTHON=no_generate(tmp_path)))
    assert f"data: {own} (the run's own" in p.stderr
    assert "evaluated before with the same settings, files and checkpoints: skipped" in p.stderr
    # the copy's runs.index names its own run (registered relative to WORK), which names its data
    assert [r["run"] for r in databins.registrations(copy)] == [os.path.join(os.path.realpath(copy), RUN)]
    assert f"referenced by: data-bin, {RUN}" in data_sh(b, "list")


# ------------------------------------------------------------------ a run copied
@pytest.mark.e2e
@TRAINED_RUN
def test_a_copied_run_is_evaluated_again_only_when_a_checkpoint_it_averages_changed(tmp_path):
    env = trained_ende(tmp_path / "work")
    original, copy = os.path.join(env["WORK"], RUN), str(tmp_path / "copy")
    cp("-r", original, copy)  # new file times, the same contents
    refuse = dict(env, SAVE_DIR=copy, PYTHON=no_generate(tmp_path))
    p = run("wmt14_en_de", "evaluate.sh", refuse)
    assert "evaluated before with the same settings, files and checkpoints: skipped" in p.stderr, p.stderr[-2000:]
    # and the reports take its evaluation as current (its checkpoints' new times are the copy's)
    from fairseq_attn_reports import runs
    hyp, ev = runs.Run(copy).hyp_for(os.path.join(env["WORK"], "data-bin", "raw", "test.de"))
    assert hyp == os.path.join(os.path.realpath(copy), "test", "hyp.txt") and ev["stale"] is None

    # one checkpoint it averages changed in content (same file, same update): evaluated again, named
    import torch
    import fairseq_attn_plugins  # noqa: F401  allowlists fairseq's checkpoint classes for torch.load
    newest = record(copy)["evaluations"]["test"]["evaluated_with"]["checkpoints"][0]
    path = os.path.join(copy, newest["file"])
    state = torch.load(path)
    name = next(k for k, v in state["model"].items() if v.is_floating_point())
    state["model"][name] = state["model"][name] + 1.0
    torch.save(state, path)
    p = run("wmt14_en_de", "evaluate.sh", refuse, check=False)
    assert p.returncode == 1 and "averaging or generate called" in p.stderr, p.stderr[-2000:]
    assert (f"evaluated again: {newest['file']} (update {newest['num_updates']}): its content changed "
            f"(sha256 {newest['sha256'][:12]}") in p.stderr, p.stderr[-2000:]
    assert "checkpoints averaged" not in p.stderr  # the same files and updates: only the content is named


@pytest.mark.e2e
@TRAINED_RUN
def test_a_copy_trained_further_is_a_run_of_its_own(tmp_path):
    from fairseq_attn_reports import runs

    env = trained_ende(tmp_path / "work")
    original, copy, twin = os.path.join(env["WORK"], RUN), str(tmp_path / "copy"), str(tmp_path / "twin")
    cp("-r", original, copy)
    cp("-r", original, twin)
    before = record(original)
    p = run("wmt14_en_de", "train.sh", dict(env, SAVE_DIR=copy, MAX_UPDATE="5"))  # one update more
    rec = record(copy)
    assert rec["num_updates"] == 5 and rec["run_id"] != before["run_id"]
    assert rec["continued_from"] == {"run_id": before["run_id"], "run_dir": before["run_dir"], "num_updates": 4}
    assert rec["run_dir"] == os.path.realpath(copy)
    assert f"a run of its own, {rec['run_id'][:12]} (continued from {before['run_id'][:12]}" in p.stdout
    assert record(original) == before  # the run it was copied from is unchanged
    # reports: the copy trained further is another run; a copy that was not is still the same run
    assert len(runs.load_runs([original, copy])) == 2
    with pytest.raises(ValueError, match=f"both hold run {before['run_id'][:12]} at update 4: one is a copy"):
        runs.load_runs([original, twin])


# ------------------------------------------------------------------ evaluate.sh registers its run
@pytest.mark.e2e
@TRAINED_RUN
def test_evaluate_registers_the_run_it_evaluates(tmp_path):
    env = trained_ende(tmp_path / "work")
    work = env["WORK"]
    moved = str(tmp_path / "elsewhere" / "run")
    os.makedirs(os.path.dirname(moved))
    shutil.move(os.path.join(work, RUN), moved)  # moved out of WORK (mv), then only evaluated there
    os.remove(os.path.join(work, "data-bin"))  # nor does data-bin keep the data (as after another prepare)
    run("wmt14_en_de", "evaluate.sh", dict(env, SAVE_DIR=moved, PYTHON=no_generate(tmp_path)))
    assert os.path.realpath(moved) in [r["run"] for r in databins.registrations(work)]
    # its old place forgotten: the data it trains on is still kept, as the evaluated run names it
    data_sh(env, "forget", os.path.join(work, RUN))
    out = data_sh(env, "prune")
    assert "0 unreferenced data folder(s)" in out and f"referenced by: {os.path.realpath(moved)}\n" in out, out


# ------------------------------------------------------------------ records of an older recipe
def test_a_step_record_naming_absolute_paths_is_read_where_its_work_was_copied(tmp_path):
    work = tmp_path / "copy"
    (work / "raw").mkdir(parents=True)
    (work / "raw" / "test.en").write_text("a b\n")
    external = tmp_path / "train.en"
    external.write_text("c d\n")
    files = [str(work / "raw" / "test.en"), str(external)]
    new = fingerprint({"DATA": str(work / "data-bin"), "lang": "en"}, files, str(work))
    assert set(new["inputs"]) == {"$WORK/raw/test.en", str(external)} and new["settings"]["DATA"] == "$WORK/data-bin"
    marker = tmp_path / "marker"

    def older(inputs, data="/old/work/data-bin"):  # as an older prepare.sh wrote it in /old/work
        marker.write_text(json.dumps({"settings": {"DATA": data, "lang": "en"}, "inputs": inputs}))
        return stage_state(str(marker), new)

    same = {"/old/work/raw/test.en": file_digest(files[0]), str(external): file_digest(files[1])}
    assert older(same) == (SAME, "")
    changed = dict(same, **{"/old/work/raw/test.en": file_digest(str(external))})
    assert older(changed) == (CHANGED, "input changed: $WORK/raw/test.en")
    assert older(same, data="/elsewhere/data-bin") == (CHANGED, "DATA: '/elsewhere/data-bin' -> '$WORK/data-bin'")
    # files that are not this WORK's in another place: each named, never taken as the same
    state, why = older({"/old/work/tok/test.en": file_digest(files[0]), str(external): file_digest(files[1])})
    assert state == CHANGED and why == ("DATA: '/old/work/data-bin' -> '$WORK/data-bin'; new input $WORK/raw/test.en; "
                                        "input no longer used: /old/work/tok/test.en; the record names files by "
                                        "absolute paths (/old/work/tok/test.en...), as an older recipe wrote them, "
                                        "that are not this WORK's files")


def test_an_evaluation_recorded_with_absolute_paths_and_checkpoint_times_is_read_by_content(tmp_path):
    data = tmp_path / "data"
    (data / "raw").mkdir(parents=True)
    (data / "raw" / "test.de").write_text("ein satz\n")
    ckpt = {"file": "checkpoint_2_4.pt", "num_updates": 4, "bytes": 100, "mtime_ns": 5, "sha256": "ab" * 32}
    new = {"settings": {"BEAM": "4"}, "inputs": {"$DATA/raw/test.de": file_digest(str(data / "raw" / "test.de"))["sha256"]},
           "checkpoints": [ckpt]}
    old = {"settings": {"BEAM": "4"}, "inputs": {"/old/work/data/abc/raw/test.de": new["inputs"]["$DATA/raw/test.de"]},
           "checkpoints": [{k: v for k, v in ckpt.items() if k != "sha256"}]}  # an older evaluate.sh: times only
    assert evaluations.same_evaluation(old, new)
    assert evaluations.same_evaluation(new, dict(new, checkpoints=[dict(ckpt, mtime_ns=9)]))  # a copy: new times
    copied = dict(old, checkpoints=[dict(old["checkpoints"][0], mtime_ns=4)])  # no sha256 to tell by: redone
    assert not evaluations.same_evaluation(copied, new)
    assert evaluations.changes(copied, new) == [
        "checkpoint_2_4.pt (update 4): its content changed (recorded without its sha256 by an older evaluate.sh, "
        "and its size or time changed since -> sha256 abababababab, 100 bytes)"]
    other = dict(new, checkpoints=[dict(ckpt, sha256="cd" * 32)])
    assert not evaluations.same_evaluation(new, other)
    assert evaluations.changes(new, other) == [
        "checkpoint_2_4.pt (update 4): its content changed (sha256 abababababab, 100 bytes -> sha256 cdcdcdcdcdcd, 100 bytes)"]
