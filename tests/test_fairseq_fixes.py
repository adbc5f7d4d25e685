"""fairseq bugs the plugin fixes: batch_by_size must not drop sentences (fairseq#5036); a process must
not abort at exit while fairseq's batch reader thread works."""

import subprocess
import sys

import numpy as np
import pytest
from fairseq.data import data_utils

import fairseq_attn_plugins  # noqa: F401  (installs the fix)


@pytest.mark.parametrize("n, mult", [(20, 8), (7, 8), (16, 8), (21, 4), (5, 1)])
@pytest.mark.parametrize("vec", [True, False])
def test_every_index_is_batched_exactly_once(n, mult, vec):
    indices = np.arange(n, dtype=np.int64)[::-1].copy()
    sizes = np.full(n, 6, dtype=np.int64)
    batches = data_utils.batch_by_size(
        indices, num_tokens_fn=lambda i: 6, num_tokens_vec=sizes if vec else None,
        max_tokens=60, required_batch_size_multiple=mult,
    )
    flat = [int(i) for b in batches for i in b]
    assert sorted(flat) == list(range(n))
    assert all(len(b) * 6 <= 60 for b in batches)
    # every batch but the last keeps fairseq's multiple
    assert all(len(b) % mult == 0 for b in batches[:-1])


def test_unpatched_fairseq_drops_sentences():
    """Documents the upstream bug the fix exists for (fails once fairseq fixes it)."""
    original = data_utils.batch_by_size.__wrapped__
    indices = np.arange(20, dtype=np.int64)
    batches = original(indices, num_tokens_fn=lambda i: 6, num_tokens_vec=np.full(20, 6),
                       max_tokens=12000, required_batch_size_multiple=8)
    assert sum(len(b) for b in batches) == 16


# ------------------------------------------------------------ fairseq's batch reader at exit
READER_AT_EXIT = r"""
import sys, time
import torch
import fairseq_attn_plugins  # noqa: F401  (installs the fix)
from fairseq.data.iterators import BufferedIterator

if sys.argv[1] == "unfixed":
    BufferedIterator._create_consumer = BufferedIterator._create_consumer.__wrapped__


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


def _reader_at_exit(mode):
    return subprocess.run([sys.executable, "-c", READER_AT_EXIT, mode], capture_output=True, text=True,
                          timeout=120)


def test_a_process_ends_cleanly_while_fairseqs_batch_reader_works():
    """Training stops while fairseq's reader thread collates the next batch: the process exits 0."""
    p = _reader_at_exit("fixed")
    assert p.returncode == 0 and "terminate called" not in p.stderr, p.stderr[-2000:]
    assert p.stdout == "first batch 0\n"


def test_unpatched_fairseq_aborts_at_exit_while_its_reader_works():
    """Documents what the fix is for: without it the same process aborts (SIGABRT) at exit."""
    p = _reader_at_exit("unfixed")
    assert p.returncode == -6 and "terminate called without an active exception" in p.stderr, p.stderr[-2000:]


def test_a_reader_that_never_parks_is_waited_for_at_most_the_timeout_and_named(caplog):
    import threading
    import time

    from fairseq.data.iterators import BufferedIterator

    from fairseq_attn_plugins.integration import exit_safety

    release = threading.Event()

    class Blocked:  # a reader waiting on its source (not on its queue) is not parked
        def __len__(self):
            return 3

        def __iter__(self):
            yield 0
            release.wait()
            yield 1

    it = BufferedIterator(2, Blocked())
    assert next(it) == 0
    t0 = time.monotonic()
    exit_safety.park_consumers(timeout_s=0.3)
    waited = time.monotonic() - t0
    assert 0.3 <= waited < 5
    assert "1 batch reader thread(s) of fairseq still running at exit after 0.3 s" in caplog.text
    assert it._consumer.name in caplog.text
    release.set()
    assert list(it) == [1]
    assert exit_safety.parked(it._consumer) or not it._consumer.is_alive()
