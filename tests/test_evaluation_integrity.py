"""An evaluation is read whole or not at all, and a run record agrees with its checkpoint: one
real recipe run (en-de, tiny model: a copy of test_recipes.trained_ende's, trained and evaluated
once per test run) trained on, evaluate.sh really killed at the points where a half-written
evaluation could be mistaken for a finished one, and every consumer (results table, Table 1)
run on what each stop leaves."""

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import stat
import sys
import types

import pytest
import sacrebleu

sys.path.insert(0, os.path.dirname(__file__))
from run_records import write_record  # noqa: E402
from test_recipes import read, run, trained_ende  # noqa: E402

from fairseq_attn_reports.cli import paper as paper_cli, results as results_cli  # noqa: E402
from fairseq_attn_reports.study_paths import load_table  # noqa: E402

pytestmark = pytest.mark.e2e


def killer(tmp_path, at):
    """A PYTHON for the recipe that kills evaluate.sh (kill -9, its parent) when the recipe calls
    the step whose arguments contain ``at``; every other call is the real interpreter."""
    path = tmp_path / f"python_killed_at_{at.replace('.', '_').replace(' ', '_')}"
    path.write_text(f'#!/usr/bin/env bash\nif [[ " $* " == *" {at} "* ]]; then kill -9 $PPID; exit 137; fi\n'
                    f'exec {sys.executable} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def cli(name, *argv):
    """A consumer's command line in this process: (exit status, stdout, stderr lines)."""
    main = {"results": results_cli.main, "paper": paper_cli.main}[name]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return types.SimpleNamespace(returncode=rc, stdout=out.getvalue(), stderr=err.getvalue(),
                                 err_lines=err.getvalue().splitlines())


def files(folder):
    return {name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))}


@pytest.mark.xdist_group("ende_trained_run")  # starts from trained_ende (test_copies, test_evaluation_reuse...)
def test_a_stopped_evaluation_is_never_read_as_finished(tmp_path):
    env = trained_ende(tmp_path / "work")  # a run trained to update 4 and evaluated on test
    work = env["WORK"]
    ref = os.path.join(work, "raw", "test.de")
    runs = tmp_path / "runs"
    save = str(runs / "baseline")  # Table 1's folder layout: one folder per row key
    os.makedirs(runs)
    os.rename(os.path.join(work, "runs", "transformer_attn_wmt_en_de"), save)
    # the other row: a run folder made by hand (record, log, translations)
    other = runs / "csan2d"
    write_record(other, "transformer_csan2d_wmt_en_de")
    shutil.copy(os.path.join(save, "train.log"), other / "train.log")
    (other / "hyp.txt").write_text("\n".join(line.split(" ")[0] for line in read(ref)) + "\n")
    record = lambda: json.load(open(os.path.join(save, "run.json")))

    def results():
        p = cli("results", "--ref", ref, save, str(other), "--names", "base", "sys", "--bs-samples", "10",
                "--ar-trials", "10", "--json", str(tmp_path / "results.json"))
        table = load_table(str(tmp_path / "results.json")) if p.returncode == 0 else None  # paths absolute again
        if p.returncode == 0:
            os.remove(tmp_path / "results.json")
        return p, table

    def consistent(table):
        """The row scores the file the record scored, with the record's own numbers."""
        ev = record()["evaluations"]["test"]
        row = table["rows"][0]
        assert row["hyp"] == os.path.join(os.path.realpath(save), "test", "hyp.txt")
        assert hashlib.sha256(open(row["hyp"], "rb").read()).hexdigest() == ev["hyp_sha256"]
        assert round(row["bleu"], 2) == ev["scores"]["bleu"]["score"]
        assert row["tok_bleu"] == ev["scores"]["tokenized_bleu"]["score"]
        scores = json.load(open(os.path.join(save, "test", "scores.json")))
        assert scores["scores"] == ev["scores"] and scores["hyp_sha256"] == ev["hyp_sha256"]
        averaged = json.load(open(os.path.join(save, "test", "averaged.json")))
        assert averaged["averaged"] == ev["averaged"]

    ev = record()["evaluations"]["test"]
    assert ev["hyp_sha256"] == hashlib.sha256(open(os.path.join(save, "test", "hyp.txt"), "rb").read()).hexdigest()
    assert not os.path.exists(os.path.join(save, "test.tmp")) and not os.path.exists(os.path.join(save, "test.old"))
    p, table = results()
    assert p.returncode == 0, p.stderr[-2000:]
    consistent(table)
    assert table["rows"][0]["stale"] is None and "‡" not in p.stdout

    # trained on after the evaluation: flagged in every table until evaluated again
    p = run("wmt14_en_de", "train.sh", dict(env, MAX_UPDATE="5", SAVE_DIR=save, CPU_THREADS="2"))
    assert "cpu_threads=2" in p.stderr and "CPU: torch computes with 2 threads per process" in p.stdout
    # the same run resumed with other threads, each start recording the threads it computed with
    assert f"resuming from {save}/checkpoint_last.pt" in p.stdout
    assert [(t["from_update"], t["to_update"], t["cpu_threads"]) for t in record()["trainings"]] == [
        (0, 2, 1), (2, 4, 1), (4, 5, 2)]
    p, table = results()
    assert p.returncode == 0, p.stderr[-2000:]
    assert "| 1 | base ‡ |" in p.stdout and not re.search(r"\| 2 \| sys( †)? ‡", p.stdout)
    assert "‡ base: evaluated before its newest checkpoint (checkpoint" in p.stdout
    t1 = cli("paper", "table1", "--ref", ref, "--runs-dir", str(runs), "--rows", "baseline,csan2d",
             "--no-base-size", "--bs-samples", "10", "--ar-trials", "10")
    assert t1.returncode == 0, t1.stderr[-2000:]
    assert "‡ baseline: evaluated before its newest checkpoint" in t1.stdout and " ‡ |" in t1.stdout

    # killed during generation: the previous evaluation stays whole (its averaged.json too)
    before = files(os.path.join(save, "test"))
    at_generate = killer(tmp_path, "fairseq_attn_recipes.fairseq_command generate")
    p = run("wmt14_en_de", "evaluate.sh", dict(env, SAVE_DIR=save, PYTHON=at_generate), check=False)
    assert p.returncode == -signal.SIGKILL and "generating" in p.stderr
    assert files(os.path.join(save, "test")) == before and record()["evaluations"]["test"] == ev
    # killed after the new translations are written, before scoring: the same
    p = run("wmt14_en_de", "evaluate.sh", dict(env, SAVE_DIR=save, PYTHON=killer(tmp_path, "score")), check=False)
    assert p.returncode == -signal.SIGKILL
    staged = os.path.join(save, "test.tmp")
    assert os.path.isfile(os.path.join(staged, "hyp.txt")) and os.path.isfile(os.path.join(staged, "averaged.json"))
    assert files(os.path.join(save, "test")) == before and record()["evaluations"]["test"] == ev
    p, table = results()
    assert p.returncode == 0, p.stderr[-2000:]
    consistent(table)
    assert "| 1 | base ‡ |" in p.stdout  # still the old evaluation, still flagged

    # stopped inside the publication (simulated: the on-disk states a kill leaves between its
    # steps). After the new folder's rename, before the record: outputs the record did not score
    shutil.copytree(os.path.join(save, "test"), os.path.join(save, "test.kept"))
    (tmp_path / "new_hyp.txt").write_text("\n".join(line.split(" ")[-1] for line in read(ref)) + "\n")
    shutil.copy(tmp_path / "new_hyp.txt", os.path.join(staged, "hyp.txt"))
    os.rename(os.path.join(save, "test"), os.path.join(save, "test.old"))
    os.rename(staged, os.path.join(save, "test"))
    got = hashlib.sha256((tmp_path / "new_hyp.txt").read_bytes()).hexdigest()
    for p in (results()[0], cli("paper", "table1", "--ref", ref, "--runs-dir", str(runs), "--rows",
                                "baseline,csan2d", "--no-base-size")):
        assert p.returncode == 1 and len(p.err_lines) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
        assert (f"{os.path.realpath(save)}/test/hyp.txt (sha256 {got[:12]}) is not the file "
                f"{os.path.realpath(save)}/run.json scored for test (sha256 {ev['hyp_sha256'][:12]})") in p.stderr
        assert "re-run evaluate.sh (EVAL_SUBSET=test)" in p.stderr
    # between the two renames: no outputs at all
    shutil.rmtree(os.path.join(save, "test"))
    p = results()[0]
    assert p.returncode == 1 and len(p.err_lines) == 1
    assert f"{os.path.realpath(save)}/test/hyp.txt is missing, but " in p.stderr and "run.json records" in p.stderr

    # evaluated again: whole, named, not stale; no leftovers
    shutil.rmtree(os.path.join(save, "test.kept"))
    run("wmt14_en_de", "evaluate.sh", dict(env, SAVE_DIR=save))
    assert sorted(n for n in os.listdir(save) if n.startswith("test")) == ["test"]
    p, table = results()
    assert p.returncode == 0, p.stderr[-2000:]
    consistent(table)
    assert table["rows"][0]["stale"] is None and "‡" not in p.stdout
    new = record()["evaluations"]["test"]
    assert new["num_updates"] == 5 and [a["num_updates"] for a in new["averaged"]] == [5, 4]
    expect = sacrebleu.corpus_bleu(read(os.path.join(save, "test", "hyp.txt")), [read(ref)])
    assert new["scores"]["bleu"]["score"] == round(expect.score, 2)

    # the record against its checkpoint: the baseline run's top-level arch edited to 2D-CSAN's
    # and its folder given as that row, then the model's arch and pieces edited too
    runs2 = tmp_path / "runs2"
    runs2.mkdir()
    shutil.copytree(other, runs2 / "baseline")
    write_record(runs2 / "baseline", "transformer_attn_wmt_en_de")
    edited_dir = str(runs2 / "csan2d")
    os.rename(save, edited_dir)
    rec = json.load(open(os.path.join(edited_dir, "run.json")))
    edited = dict(rec, arch="transformer_csan2d_wmt_en_de")
    json.dump(edited, open(os.path.join(edited_dir, "run.json"), "w"))
    table1 = ("paper", "table1", "--ref", ref, "--runs-dir", str(runs2), "--rows", "baseline,csan2d", "--no-base-size")
    for p in (cli(*table1), cli("results", "--ref", ref, str(runs2 / "baseline"), edited_dir)):
        assert p.returncode == 1 and len(p.err_lines) == 1, p.stderr[-2000:]
        assert (f"{os.path.realpath(edited_dir)}/run.json: arch 'transformer_csan2d_wmt_en_de' contradicts "
                f"model.arch 'transformer_attn_wmt_en_de' in the same record") in p.stderr
    edited["model"] = dict(rec["model"], arch="transformer_csan2d_wmt_en_de", attn_pieces="csan2d")
    json.dump(edited, open(os.path.join(edited_dir, "run.json"), "w"))
    p = cli(*table1)
    assert p.returncode == 1 and len(p.err_lines) == 1, p.stderr[-2000:]
    real = os.path.realpath(edited_dir)
    assert (f"{real}/run.json contradicts the configuration of its checkpoint {real}/checkpoint5.pt: "
            f"arch: 'transformer_csan2d_wmt_en_de' in run.json, 'transformer_attn_wmt_en_de' in checkpoint5.pt; "
            f"attn_pieces: 'csan2d' in run.json, '' in checkpoint5.pt") in p.stderr
    json.dump(rec, open(os.path.join(edited_dir, "run.json"), "w"))  # restored: accepted again
    p = cli("results", "--ref", ref, str(runs2 / "baseline"), edited_dir, "--bs-samples", "10", "--ar-trials", "10")
    assert p.returncode == 0, p.stderr[-2000:]
