"""One exit-status rule for every command of the product (docs/howto/train.md, "Exit status"): 2 for a
usage error (an argument, flag or action the command does not take), 1 for a refused input (a
setting, file, folder or value that is not what is allowed) or a failed step, 0 for success. Every
recipe script and every console command is found here by itself; each is given an unknown argument
and a refused input that costs no training. The refused input of each is named below, so a new
script or command without one fails this test."""

import os
import subprocess
import sys
import tomllib

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_recipe_refusals import SCRIPTS, script  # noqa: E402
from test_recipes import ROOT  # noqa: E402


def refused_input(name, tmp_path):
    """A recipe script's refused input, cheap to reach: (arguments, environment, what the error says)."""
    nowhere = str(tmp_path / "nowhere")
    return {
        "prepare.sh": ((), {"TRAIN_SRC": nowhere + ".src", "TRAIN_TGT": nowhere + ".tgt"}, f"TRAIN_SRC={nowhere}.src: no such file"),
        "train.sh": ((), {"DATA": nowhere}, f"no binarised data in {nowhere}"),
        "evaluate.sh": ((), {"SAVE_DIR": nowhere}, f"no checkpoints in {nowhere}"),
        "data.sh": (("register", nowhere), {}, "no such folder"),
        "lengths.sh": ((), {"QUICK": "yes"}, "QUICK=yes: give whether to run the quick CPU sizes, 1 (on) or 0 (off)"),
        "sweep.sh": ((), {"SWEEP": nowhere}, f"SWEEP={nowhere}: no such file"),
        "align.sh": ((), {"RUNS": ""}, "no evaluated run in"),
        "table1.sh": ((), {"ROWS": "nope"}, "ROWS=nope: give the Table 1 rows, 'all' (the paper's rows) or row keys"),
        "figure2.sh": ((), {}, "no binarised data in"),
        "figure3.sh": ((), {}, "hyp.txt is missing: run table1.sh first"),
    }[name]


def errors(p):
    """The error lines: the script's own ("error: ...") and a step's ("PROGRAM: error: ...")."""
    return [line for line in p.stderr.splitlines() if line.startswith("error: ") or ": error: " in line]


@pytest.mark.parametrize("recipe", sorted(SCRIPTS))
def test_every_recipe_script_exits_2_for_a_usage_error_and_1_for_a_refused_input(recipe, tmp_path):
    """The usage error: an argument no script takes (--dry-run, which a user may well try), refused
    in one line before doing anything: nothing made, not even WORK."""
    for name in SCRIPTS[recipe]:
        work = tmp_path / name / "work"
        usage = ("list", "--dry-run") if name == "data.sh" else ("--dry-run",)
        p = script(recipe, name, *usage, env={"WORK": str(work)}, check=False)
        assert p.returncode == 2 and p.stderr.splitlines() == errors(p) and len(errors(p)) == 1, (recipe, name, p.stderr)
        assert "unknown argument '--dry-run'" in p.stderr, (recipe, name, p.stderr)
        assert not work.exists(), (recipe, name)
        args, env, says = refused_input(name, tmp_path / name)
        p = script(recipe, name, *args, env=dict(env, WORK=str(work)), check=False)
        assert p.returncode == 1 and len(errors(p)) == 1 and says in errors(p)[0], (recipe, name, p.stderr[-2000:])
        # an interpreter that does not run: refused before any step, the same status
        p = script(recipe, name, *args, env=dict(env, WORK=str(work), PYTHON=str(tmp_path / "no-python")), check=False)
        assert p.returncode == 1 and len(errors(p)) == 1 and "does not run" in errors(p)[0], (recipe, name, p.stderr)
        if name == "train.sh":  # before an unknown argument too (no step started: bash alone)
            p = script(recipe, name, "--dry-run", env=dict(WORK=str(work), PYTHON=str(tmp_path / "no-python")), check=False)
            assert p.returncode == 1 and errors(p) == p.stderr.splitlines() and "does not run" in errors(p)[0], p.stderr


def console_commands():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return sorted(tomllib.load(f)["project"]["scripts"])


#: a refused input of each console command (and of the recipes' steps, run by module): arguments that
#: parse, with a value, file or folder that is not allowed
REFUSED = {
    "fairseq-attn-demo": (["--archs", "transformer_nope"], "transformer_nope"),
    "fairseq-attn-significance": (["nowhere.ref", "a.txt", "b.txt"], "nowhere.ref: no such file"),
    "fairseq-attn-results": (["--ref", "nowhere.ref", "a", "b"], "a: no such run folder"),
    "fairseq-attn-bench": (["--device", "cpu", "--dtype", "fp16"], "--dtype fp16 needs --device cuda"),
    "fairseq-attn-plot": (["data", "--path", "nowhere.pt", "--sentence", "x"], "checkpoint not found: nowhere.pt"),
    "fairseq-attn-paper": (["rows", "--rows", "nope"], "unknown row(s) nope"),
    "fairseq-attn-export": (["data", "--path", "nowhere.pt", "--to", "ct2"], "checkpoint not found: nowhere.pt"),
    "fairseq-attn-pieces": (["nosuchpiece"], "unknown piece(s) ['nosuchpiece']"),
    "fairseq-attn-align": (["--checkpoint", "nowhere.pt", "--data", "nowhere"], "--data nowhere: no such data folder"),
    "-m fairseq_attn_recipes": (["profile", "bigger"], "bigger"),
}


def test_every_console_command_has_a_refused_input_here():
    assert set(console_commands()) | {"-m fairseq_attn_recipes"} == set(REFUSED)


@pytest.mark.parametrize("command", sorted(REFUSED))
def test_every_console_command_exits_2_for_an_unknown_flag_and_1_for_a_refused_input(command, tmp_path):
    if command.startswith("-m "):
        argv = [sys.executable, *command.split()]
    else:
        argv = [os.path.join(os.path.dirname(sys.executable), command)]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    args, says = REFUSED[command]
    p = subprocess.run(argv + args + ["--bogus"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert p.returncode == 2 and "--bogus" in p.stderr.splitlines()[-1], (command, p.stderr[-2000:])
    p = subprocess.run(argv + args, capture_output=True, text=True, cwd=tmp_path, env=env)
    said = [line for line in p.stderr.splitlines() if "tensorboardX" not in line]
    assert p.returncode == 1 and len(said) == 1 and says in said[0], (command, p.stderr[-2000:])
    assert os.listdir(tmp_path) == [], (command, os.listdir(tmp_path))  # nothing written


def test_the_documented_rule_is_the_one_the_code_follows():
    from fairseq_attn_recipes import train
    from fairseq_attn_recipes.fingerprints import CHANGED, NOT_DONE, SAME

    with open(os.path.join(ROOT, "docs", "howto", "train.md"), encoding="utf-8") as f:
        doc = f.read().split("## Exit status\n", 1)[1].split("\n## ", 1)[0]
    with open(os.path.join(ROOT, "recipes", "lib", "common.sh"), encoding="utf-8") as f:
        lib = f.read().splitlines()
    assert 'usage_error() { echo "error: $*" >&2; exit 2; }' in lib and 'die() { echo "error: $*" >&2; exit 1; }' in lib
    assert "`usage_error` (2) and `die`\n(1)" in doc
    assert [line.split(" | ")[0] for line in doc.splitlines() if line.startswith("| ") and line[2].isdigit()] == [
        "| 0", "| 2", "| 1"]
    assert (f"exit {SAME} (done\nbefore with the same settings and inputs), {CHANGED} (changed since, printed) or "
            f"{NOT_DONE} (never done)") in doc
    assert f"exits {train.SKIPPED} for a run\ntrained to `--max-update` before" in doc
