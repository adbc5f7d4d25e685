"""fairseq's preprocess and generate commands as the recipes and the demo run them:
``python -m fairseq_attn_recipes.fairseq_command preprocess|generate ARGS`` is
``python -m fairseq_cli.preprocess|generate ARGS`` with fairseq imported without scikit-learn and
scipy.stats (:mod:`fairseq_attn_records.fairseq_import`: about 1.2 s less per process).

The module runs as ``python -m`` runs it (``runpy``: ``__main__``, ``sys.argv[0]`` its file), so
the arguments, output, logs, exit status and the plugin's behaviour in the command are
fairseq's own; an argument error of a flag a recipe variable gave (PREPROCESS_ARGS, GEN_ARGS, named in
:data:`.flag_origins.ENV`) names that variable.

``generate --average RUN_DIR --n N [--at-update U] --output CKPT [--record JSON] --stdout OUT --stderr
ERR -- ARGS`` (evaluate.sh) is the recipes' ``average`` step then fairseq-generate in one process (one
start of torch and fairseq per evaluation instead of two, about 3 s of CPU): the process's output goes
to OUT and ERR as a shell redirects it, but the step's messages and refusal (exit 1, OUT and ERR
removed) go where they would have gone.

``preprocess --first N ARGS`` (binarise: the dictionary of the uncapped pairs, then the capped
data-bin made with it) is fairseq-preprocess on the first N arguments, then on the rest, in one process
(one start of torch and fairseq instead of two); a first run that fails ends it.
"""

import argparse
import contextlib
import os
import runpy
import sys

from fairseq_attn_records.command_line import Parser
from fairseq_attn_records.fairseq_import import import_fairseq

from . import flag_origins
from .process_exit import exit_now

COMMANDS = ("preprocess", "generate")
#: ``preprocess --first N``: the first N arguments are a run of their own, before the rest
FIRST = "--first"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m fairseq_attn_recipes.fairseq_command {{{','.join(COMMANDS)}}} ARGS...: "
              f"{'no command given' if not argv else repr(argv[0]) + ' is not one of them'}", file=sys.stderr)
        return 2
    average = None
    if argv[:2] == ["generate", "--average"]:
        if "--" not in argv:
            print("usage: python -m fairseq_attn_recipes.fairseq_command generate --average RUN_DIR --n N "
                  "[--at-update U] --output CKPT [--record JSON] --stdout OUT --stderr ERR -- ARGS...: no --",
                  file=sys.stderr)
            return 2
        cut = argv.index("--")
        ap = Parser(prog="python -m fairseq_attn_recipes.fairseq_command generate --average",
                    allow_abbrev=False)
        ap.add_argument("--stdout", required=True)
        ap.add_argument("--stderr", required=True)
        outputs, step_args = ap.parse_known_args(argv[2:cut])
        argv = argv[:1] + argv[cut + 1:]
        average = (step_args, outputs.stdout, outputs.stderr, redirected(outputs.stdout, outputs.stderr))
    runs = [argv[1:]]
    if argv[:2] == ["preprocess", FIRST]:
        n = int(argv[2]) if len(argv) > 2 and argv[2].isdigit() else -1
        if not 0 < n < len(argv) - 3:
            print("usage: python -m fairseq_attn_recipes.fairseq_command preprocess --first N ARGS...: N (the "
                  "first run's arguments) must be a positive number below the count of ARGS", file=sys.stderr)
            return 2
        runs = [argv[3:3 + n], argv[3 + n:]]
    import_fairseq()
    for i, run in enumerate(runs):
        code = run_command(argv[0], run, average)
        if code:
            return code
        if i < len(runs) - 1:
            closed_preprocess_log()
    return 0


def run_command(command: str, args, average) -> int:
    """fairseq's ``command`` on ``args`` in this process, as ``python -m fairseq_cli.COMMAND ARGS``."""
    argv = [command, *args]
    sys.argv = [sys.argv[0], *argv[1:]]  # runpy puts the module's file in sys.argv[0], as python -m
    if average is None and not flag_origins.sources():
        runpy.run_module(f"fairseq_cli.{argv[0]}", run_name="__main__", alter_sys=True)
        return 0
    # flags of recipe variables (PREPROCESS_ARGS, GEN_ARGS): an argument error names the variable. The
    # plugin (--user-dir) imported first: its one-line argparse errors are installed before this hold
    if "--user-dir" in argv[:-1]:  # as fairseq imports it (its memo: not said to be imported twice)
        from fairseq import utils
        utils.import_user_module(argparse.Namespace(user_dir=argv[argv.index("--user-dir") + 1]))
    if average is not None:
        average_checkpoints(*average)
    try:
        with flag_origins.argument_errors_raised():
            runpy.run_module(f"fairseq_cli.{argv[0]}", run_name="__main__", alter_sys=True)
    except flag_origins.ArgumentError as e:
        return flag_origins.report(e, argv[1:], tool=f"fairseq-{argv[0]}")
    return 0


def closed_preprocess_log() -> None:
    """The log file fairseq-preprocess opened in the folder it wrote (a handler on its logger),
    closed, so that the next run's lines go to its own folder's log alone."""
    import logging

    log = logging.getLogger("fairseq_cli.preprocess")
    for handler in [h for h in log.handlers if isinstance(h, logging.FileHandler)]:
        log.removeHandler(handler)
        handler.close()


def redirected(stdout: str, stderr: str):
    """This process's stdout and stderr written to these files from now on (file descriptors 1 and
    2, as a shell redirects them); returns descriptors of where they went before."""
    before = []
    for stream, path in ((sys.stdout, stdout), (sys.stderr, stderr)):
        stream.flush()
        before.append(os.dup(stream.fileno()))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        os.dup2(fd, stream.fileno())
        os.close(fd)
    return before


def average_checkpoints(step_args, stdout: str, stderr: str, before) -> None:
    """The recipes' ``average`` step on ``step_args``, its messages where the output went before
    :func:`redirected`; a refusal exits with its status and removes both files."""
    from .__main__ import main as step

    with open(before[0], "w") as out, open(before[1], "w") as err:
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                step(["average", *step_args])
        except SystemExit as e:
            if e.code:
                for path in (stdout, stderr):
                    os.remove(path)
            raise


if __name__ == "__main__":
    exit_now(main())  # without the interpreter's teardown (process_exit.py)
