"""An evaluation is done once: evaluate.sh (and lengths.sh, which runs it for every run) skips the
evaluation its run folder holds for the same settings, files and checkpoints averaged, and redoes
a changed one naming the change. The skip is proven by a PYTHON that refuses the evaluation's
own steps (checkpoint averaging, which comes first, and fairseq-generate): a re-run that averaged
or decoded would fail, and a changed evaluation fails at its first step, its change named."""

import json
import os
import stat
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_recipes import run, trained_ende  # noqa: E402


def no_generate(tmp_path):
    """A PYTHON for the recipe that fails (exit 97) when asked to average checkpoints or run
    fairseq-generate, the steps a redone evaluation runs after deciding to redo it."""
    path = tmp_path / "python_without_generate"
    path.write_text('#!/usr/bin/env bash\nif [[ " $* " == *" fairseq_attn_recipes.fairseq_command generate "* || " $* " == *" fairseq_attn_recipes average "* ]]; '
                    f'then echo "averaging or generate called" >&2; exit 97; fi\nexec {sys.executable} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.mark.e2e
@pytest.mark.xdist_group("ende_trained_run")  # with test_copies: the tests starting from trained_ende
def test_the_same_evaluation_is_skipped_and_a_changed_one_redone(tmp_path):
    env = trained_ende(tmp_path / "work")  # a run trained to update 4 and evaluated
    save = os.path.join(env["WORK"], "runs", "transformer_attn_wmt_en_de")
    record = lambda: json.load(open(os.path.join(save, "run.json")))["evaluations"]["test"]
    first = record()
    used = first["evaluated_with"]
    assert used["settings"]["LENPEN"] == "0.6" and used["settings"]["GEN_ARGS"] == "--max-len-a 1.2 --max-len-b 5"
    assert [c["file"] for c in used["checkpoints"]] == [a["file"] for a in first["averaged"]]
    scores = json.load(open(os.path.join(save, "test", "scores.json")))
    assert scores["evaluated_with"] == used

    # the same evaluation: nothing decoded, the record untouched
    p = run("wmt14_en_de", "evaluate.sh", dict(env, PYTHON=no_generate(tmp_path)))
    assert "evaluated before with the same settings, files and checkpoints: skipped" in p.stderr
    assert record() == first and not os.path.exists(os.path.join(save, "test.tmp"))

    # a wrong flag in GEN_ARGS: fairseq-generate's parser refuses it; the script ends with that one
    # line naming the variable (none of generate.err's other lines), and the evaluation is kept
    p = run("wmt14_en_de", "evaluate.sh", dict(env, GEN_ARGS="--max-len-a 1.2 --beem 3"), check=False)
    errors = [line for line in p.stderr.splitlines() if not line.startswith("[wmt14_en_de ")]
    assert p.returncode == 1 and len(errors) == 1 and errors[0].startswith("error: GEN_ARGS="), p.stderr[-2000:]
    assert "--beem" in errors[0] and p.stderr.endswith(errors[0] + "\n")
    assert record() == first and os.path.exists(os.path.join(save, "test", "hyp.txt"))

    # each change is an evaluation of its own: it would decode again, the change named
    changes = dict(LENPEN="1.0", GEN_ARGS="--max-len-a 1.2 --max-len-b 3", N_AVG="1")
    for key, named in (("LENPEN", "LENPEN: '0.6' -> '1.0'"), ("GEN_ARGS", "GEN_ARGS: "), ("N_AVG", "N_AVG: '2' -> '1'")):
        p = run("wmt14_en_de", "evaluate.sh", dict(env, PYTHON=no_generate(tmp_path), **{key: changes[key]}), check=False)
        assert p.returncode == 1 and "generate called" in p.stderr and named in p.stderr, p.stderr[-2000:]
    # trained on: the checkpoints averaged changed, alone (the settings as before): redone too
    run("wmt14_en_de", "train.sh", dict(env, MAX_UPDATE="6"))
    p = run("wmt14_en_de", "evaluate.sh", dict(env, PYTHON=no_generate(tmp_path)), check=False)
    assert p.returncode == 1 and "generate called" in p.stderr, p.stderr[-2000:]
    assert "checkpoints averaged: " in p.stderr and "(update 6)" in p.stderr and "LENPEN" not in p.stderr
    # and is redone (the three settings changed and the checkpoints in one evaluation), recorded with them
    p = run("wmt14_en_de", "evaluate.sh", dict(env, **changes))
    assert "LENPEN: '0.6' -> '1.0'" in p.stderr and "N_AVG: '2' -> '1'" in p.stderr
    assert "checkpoints averaged: " in p.stderr and "(update 6)" in p.stderr
    assert all(record()["evaluated_with"]["settings"][k] == v for k, v in changes.items())
    assert record()["evaluated_with"]["checkpoints"][0]["num_updates"] == 6
    p = run("wmt14_en_de", "evaluate.sh", dict(env, PYTHON=no_generate(tmp_path), **changes))
    assert "skipped" in p.stderr
