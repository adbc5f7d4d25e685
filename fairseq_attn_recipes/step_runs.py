"""A step run from Python as the shell recipes run it (``python -m MODULE ARGS``), its output
appended to a log file (the demo's steps)."""

import os
import subprocess
import sys
from typing import List


class StepFailed(RuntimeError):
    pass


def run_module(module: str, args: List[str], logfile: str, threads: int = 1, echo=None, ok=(0,)) -> None:
    """Run ``python -m module args`` with ``threads`` torch threads, appending its output to
    ``logfile`` (each line also to ``echo``); an exit status not in ``ok`` raises :class:`StepFailed`
    with the step's last ``error:`` line."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYTHONWARNINGS="ignore")
    cmd = [sys.executable, "-m", module] + args
    with open(logfile, "a", encoding="utf-8") as lf:
        lf.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for line in proc.stdout:
            lf.write(line)
            lf.flush()
            if echo:
                echo(line)
        rc = proc.wait()
    if rc not in ok:
        with open(logfile, encoding="utf-8") as lf:
            errors = [line.strip() for line in lf if line.startswith("error: ")]
        raise StepFailed(f"{module} failed (exit {rc}){': ' + errors[-1][7:] if errors else ''}; see {logfile}")
