"""Importing the plugin changes nothing in the interpreter of a script, a notebook or pytest: the
one-line refusals (``sys.excepthook``) and the one-line argparse errors naming the nearest flag
are installed only where the running program is a fairseq command or one of ours. What says
nothing to the user is dropped everywhere (fairseq's tensorboardX notice, torch's known-harmless
warnings, by message), and our commands print only their output (no INFO lines)."""

import argparse
import os
import subprocess
import sys

import pytest

from fairseq_attn_plugins.integration import refusals

sys.path.insert(0, os.path.dirname(__file__))
import plugin_script  # noqa: E402

PLUGIN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fairseq_attn_plugins")


@pytest.fixture(scope="module")
def a_script():
    """One script's interpreter (plugin_script: one start of torch and fairseq, shared with
    test_import_cost): the hooks checked right after the import, printing "untouched"; the filters
    of fairseq's logger, printed; the two warnings fairseq-train gives on a CPU (its batch
    iterator's pinned memory, its step's autocast), which the package drops by message, and
    another warning, which passes; then a script's own error raised by the plugin, which keeps its
    traceback. What the script printed itself and its stderr, the stages of test_import_cost left out."""
    done = plugin_script.run()
    return subprocess.CompletedProcess(done.args, done.returncode, plugin_script.script_stdout(),
                                       plugin_script.script_stderr())


@pytest.mark.xdist_group("import_cost")  # the script of plugin_script: one worker starts it once
def test_importing_the_plugin_leaves_the_interpreter_alone(a_script):
    p = a_script
    lines = p.stdout.splitlines()
    assert len(lines) == 2 and lines[0] == "untouched", p.stdout + p.stderr  # the second: the logger's filters
    assert p.returncode == 1 and "Traceback" in p.stderr and "call attention_defaults(args) first" in p.stderr


@pytest.mark.xdist_group("import_cost")  # the script of plugin_script: one worker starts it once
def test_importing_the_plugin_prints_nothing_and_fairseqs_cpu_warnings_are_dropped_by_message(a_script):
    """``import fairseq_attn_plugins`` prints nothing (fairseq's tensorboardX notice was its only
    line); torch's pinned-memory and autocast warnings, which fairseq-train gave at every CPU
    training, are dropped by their message: another warning of the same kind still prints."""
    out, err = a_script.stdout, a_script.stderr
    assert out.startswith("untouched\n"), out + err
    lines = err.splitlines()
    assert lines[0].endswith("UserWarning: pin_memory: another warning"), err
    assert lines[1] == "Traceback (most recent call last):", err
    assert not any(word in err for word in ("tensorboardX", "accelerator", "autocast")), err


def test_which_programs_are_commands():
    for argv0, main in (("/venv/bin/fairseq-generate", ""), ("/venv/bin/fairseq-train", ""),
                        ("/x/fairseq_cli/generate.py", "fairseq_cli.generate"),
                        ("/x/fairseq_attn_recipes/train.py", "fairseq_attn_recipes.train"),
                        ("/venv/bin/fairseq-attn-results", "")):
        assert refusals.running_command(argv0, main), argv0
    for argv0, main in (("-c", ""), ("/venv/bin/pytest", ""), ("notebook.py", ""), ("/venv/bin/ipython", "")):
        assert not refusals.running_command(argv0, main), argv0
    # argparse's errors are one line only where fairseq's parser runs (ours print their own)
    assert refusals.fairseq_parser_command("/venv/bin/fairseq-train", "")
    assert refusals.fairseq_parser_command("/x/fairseq_attn_recipes/train.py", "fairseq_attn_recipes.train")
    assert not refusals.fairseq_parser_command("/venv/bin/fairseq-attn-results", "")
    # our own commands (their logging at WARNING): fairseq-attn-*, their modules, the recipe steps;
    # not fairseq's, nor the training step, nor fairseq's preprocess and generate run by the recipes
    for argv0, main in (("/venv/bin/fairseq-attn-plot", ""), ("/x/plot.py", "fairseq_attn_reports.cli.plot"),
                        ("/x/pieces.py", "fairseq_attn_plugins.cli.pieces"), ("/x/demo.py", "fairseq_attn_recipes.demo"),
                        ("/x/__main__.py", "fairseq_attn_recipes.__main__")):
        assert refusals.own_command(argv0, main), (argv0, main)
    for argv0, main in (("/venv/bin/fairseq-train", ""), ("/x/train.py", "fairseq_attn_recipes.train"),
                        ("/x/fairseq_command.py", "fairseq_attn_recipes.fairseq_command"), ("-c", "")):
        assert not refusals.own_command(argv0, main), (argv0, main)


def test_an_unknown_flag_names_the_nearest(capsys):
    parser = argparse.ArgumentParser(prog="fairseq-train")
    for flag in ("--csan-window", "--csan-layers", "--relpos-k"):
        parser.add_argument(flag)
    # where the model's flags are listed: fairseq-attn-pieces (fairseq-train --help shows none of them)
    for argv, listed in ((["data", "--arch", "transformer_csan2d_wmt_en_de", "--csan-windw", "3"],
                          "fairseq-attn-pieces --arch transformer_csan2d_wmt_en_de lists its flags"),
                         (["data", "--arch=transformer_csan_wmt_en_de"], "fairseq-attn-pieces --arch transformer_csan_wmt_en_de"),
                         (["data", "-a", "transformer_relpos_wmt_en_de"], "fairseq-attn-pieces --arch transformer_relpos_wmt_en_de"),
                         (["data", "--path", "x.pt"], "fairseq-attn-pieces --arch ARCH lists an architecture's flags")):
        with pytest.raises(SystemExit) as e:
            refusals.parser_error(parser, "unrecognized arguments: --csan-windw 3", argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: unrecognized arguments: --csan-windw 3 (did you mean --csan-window?) ("), err
        assert listed in err and "--help" not in err and err.count("\n") == 1, err


@pytest.mark.e2e
def test_fairseq_generate_still_prints_a_refusal_in_one_line(tmp_path):
    """A real fairseq-generate (console script) with the plugin as --user-dir: a refused checkpoint
    is its last line, without traceback."""
    bad = tmp_path / "checkpoint.pt"
    bad.write_bytes(b"not a checkpoint")
    gen = os.path.join(os.path.dirname(sys.executable), "fairseq-generate")
    sys.path.insert(0, os.path.dirname(__file__))
    import trained_models

    p = subprocess.run([gen, trained_models.data_dir(), "--user-dir", PLUGIN_DIR, "--path", str(bad), "--cpu"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.stderr.splitlines()[-1].startswith(f"error: checkpoint '{bad}' (16 bytes) is corrupt"), p.stderr[-2000:]


@pytest.mark.xdist_group("import_cost")  # the script of plugin_script: one worker starts it once
def test_commands_print_what_was_asked_and_nothing_before(a_script, tmp_path):
    """Our commands print their output alone: fairseq-attn-plot on a trained checkpoint, the
    translation first, then the statistics, and nothing on stderr (neither fairseq's import-time
    "Please install tensorboardX", its speech task's, nor the INFO lines of loading the
    checkpoint: dictionary sizes, the pieces per layer); a recipe step that builds a model
    (lengths.sh's check-positions), its one line alone."""
    sys.path.insert(0, os.path.dirname(__file__))
    import trained_models

    plot = os.path.join(os.path.dirname(sys.executable), "fairseq-attn-plot")
    p = subprocess.run([plot, trained_models.data_dir(), "--path", trained_models.trained("relpos"),
                        "--sentence", "rot hund sieht", "--no-png", "--out-dir", str(tmp_path / "plots")],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("translation: ") and lines[1].split() == ["side", "layer", "head", "entropy",
                                                                          "div", "disagree"], p.stdout[:2000]
    p = subprocess.run([sys.executable, "-m", "fairseq_attn_recipes", "check-positions", "--data",
                        trained_models.data_dir(), "--src", "src", "--tgt", "tgt", "--arch", "transformer_attn_wmt_en_de"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and p.stderr == "" and p.stdout == "transformer_attn_wmt_en_de\t\n", p.stdout + p.stderr
    # a script importing the package (the fixture's): the same filter on fairseq's logger, alone
    lines = a_script.stdout.splitlines()
    assert len(lines) == 2 and lines[1].startswith("[<fairseq_attn_plugins.integration.quiet_imports.DropNotice "
                                                   "object at ") and lines[1].count("object at") == 1, a_script.stdout
