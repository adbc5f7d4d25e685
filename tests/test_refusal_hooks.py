"""Importing the plugin changes nothing in the interpreter of a script, a notebook or pytest: the
one-line refusals (``sys.excepthook``) and the one-line argparse errors naming the nearest flag
are installed only where the running program is a fairseq command or one of ours."""

import argparse
import os
import subprocess
import sys

import pytest

from fairseq_attn_plugins.integration import refusals

PLUGIN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fairseq_attn_plugins")


@pytest.fixture(scope="module")
def a_script():
    """One script's interpreter (one start of torch and fairseq): the hooks checked right after the
    import, printing "untouched"; the filters of fairseq's logger quieted in the commands, printed;
    then a script's own error raised by the plugin, which keeps its traceback."""
    from fairseq_attn_plugins.integration import quiet_imports
    code = ("import argparse, logging, sys; h = sys.excepthook; e = argparse.ArgumentParser.error; "
            "import fairseq_attn_plugins; assert sys.excepthook is h; assert argparse.ArgumentParser.error is e; "
            "print('untouched', flush=True); "
            f"print(logging.getLogger({quiet_imports.LOGGER!r}).filters, flush=True); "
            "from fairseq_attn_core.flags import validate_attention_args; "
            "validate_attention_args(argparse.Namespace(attn_pieces='nosuch', attn_backend='auto'))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_importing_the_plugin_leaves_the_interpreter_alone(a_script):
    p = a_script
    lines = p.stdout.splitlines()
    assert len(lines) == 2 and lines[0] == "untouched", p.stdout + p.stderr  # the second: the logger's filters
    assert p.returncode == 1 and "Traceback" in p.stderr and "call attention_defaults(args) first" in p.stderr


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


def test_commands_do_not_start_with_fairseqs_tensorboardx_notice(a_script):
    """fairseq's import-time "Please install tensorboardX" (its speech task's) is not printed by
    this distribution's commands; a script importing the package keeps fairseq's logging."""
    pieces = os.path.join(os.path.dirname(sys.executable), "fairseq-attn-pieces")
    for argv, first in (([pieces, "--arch", "transformer_csan2d_wmt_en_de"], "--attn-pieces 'csan2d': "),
                        ([sys.executable, "-m", "fairseq_attn_recipes", "check-arch", "transformer_attn_wmt_en_de"], None)):
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0 and "tensorboardX" not in p.stdout + p.stderr, p.stdout + p.stderr
        if first:
            assert p.stdout.startswith(first), p.stdout
    # a script importing the package (the fixture's): fairseq's logger without the commands' filter
    lines = a_script.stdout.splitlines()
    assert len(lines) == 2 and lines[1] == "[]", a_script.stdout + a_script.stderr
