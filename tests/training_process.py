"""A training process's start and end, in a fresh interpreter (not a test module): named as
fairseq-train (every row of the plugin's table of fixes then applies, the refusals included),
fairseq imported as a training command imports it, then the plugin; its batch reader thread still
busy when the process ends. One process per mode, started once per test process; the tests that
share the fixed one carry ``xdist_group("training_process")`` (test_fairseq_fixes,
test_fixes_once), so one pytest-xdist worker starts it once.

``fixed``: the installer of the fixes run twice more, then each replaced function's marks (every
fix found along its ``__wrapped__`` chain) printed as a JSON line; then the reader. ``unfixed``: the
reader's fix taken off again (its ``__wrapped__``), then the reader.
"""

import functools
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

SCRIPT = r"""
import json, sys, time
sys.argv[0] = "/venv/bin/fairseq-train"
import torch
from fairseq_attn_records.fairseq_import import import_fairseq
import_fairseq()  # as a training command imports it (without scikit-learn: ~1 s of CPU less per process)
import fairseq_attn_plugins  # noqa: F401  (installs the fixes)
from fairseq.data.iterators import BufferedIterator
from fairseq_attn_plugins.integration import fixes

if sys.argv[1] == "unfixed":
    BufferedIterator._create_consumer = BufferedIterator._create_consumer.__wrapped__
else:
    fixes.install()
    fixes.install()
    marks = {}
    for fix in fixes.FIXES:
        owner, attribute = fix.owner_and_attribute()
        function, names = getattr(owner, attribute), []
        while function is not None:
            if getattr(function, fixes.MARK, None) is not None:
                names.append(getattr(function, fixes.MARK))
            function = getattr(function, "__wrapped__", None)
        marks[fix.target] = names
    print(json.dumps(marks), flush=True)


class Slow:  # each batch some 0.2 s of torch work in the reader thread, as a collate of big batches
    def __len__(self):
        return 50

    def __iter__(self):
        x = torch.randn(300, 300)
        for i in range(50):
            t = time.monotonic()
            while time.monotonic() - t < 0.2:
                x = torch.tanh(x @ x)
            yield i


it = BufferedIterator(2, Slow())
print("first batch", next(it), flush=True)
"""


@functools.lru_cache(maxsize=None)
def run(mode: str) -> subprocess.CompletedProcess:
    """The process of ``mode`` ("fixed" or "unfixed"), once per test process."""
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
