"""Triton's CPU interpreter for the tests of the Triton kernels (not a test module).

triton 3.6 chooses the interpreter when ``@triton.jit`` decorates a function, and its own
library (``tl.zeros``, ``tl.sum``'s combine functions...) is decorated when ``triton.language``
is first imported: ``TRITON_INTERPRET=1`` must be set before the process imports triton at all.
So the kernels run in a child process started with it (:func:`run_interpreted`), which
computes every case of :mod:`triton_cases` and saves the tensors; the tests compare them with
the float64 references in the pytest process. Nothing of the worker's environment or
modules changes for any other test.
"""

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def have_triton() -> bool:
    import importlib.util
    return importlib.util.find_spec("triton") is not None


def run_interpreted(out: Path, script: str = "triton_cases.py") -> dict:
    """Run every case of ``script`` (default :mod:`triton_cases`) under the interpreter in one
    child process (one start of torch); its results (triton_cases: kind -> case index -> tensors)."""
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "tests" / script), str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return torch.load(out)


def skip_overflow_checks() -> None:
    """In the child, before the first kernel runs: the interpreter's int32 overflow check of every
    integer add, sub and mul left out (``sanitize_overflow``: a third of its time here). Compiled
    kernels assert it only in debug builds; the cases hold a few thousand elements, no index comes
    near 2**31, and the results are bit-identical with the check."""
    from triton.runtime import interpreter
    interpreter.interpreter_builder.options = interpreter.InterpreterOptions(sanitize_overflow=False)
