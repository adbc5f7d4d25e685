"""fairseq bugs the plugin fixes: batch_by_size must not drop sentences (fairseq#5036); a process must
not abort at exit while fairseq's batch reader thread works; a resumed fp16 run keeps its loss
scaler's schedule."""

import os
import sys

import numpy as np
import pytest
from fairseq.data import data_utils

import fairseq_attn_plugins  # noqa: F401  (installs the fix)

sys.path.insert(0, os.path.dirname(__file__))
import training_process  # noqa: E402


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
@pytest.mark.xdist_group("training_process")  # its process also shows test_fixes_once's marks: started once
def test_a_process_ends_cleanly_while_fairseqs_batch_reader_works():
    """Training stops while fairseq's reader thread collates the next batch: the process exits 0."""
    p = training_process.run("fixed")
    assert p.returncode == 0 and "terminate called" not in p.stderr, p.stderr[-2000:]
    assert p.stdout.splitlines()[1:] == ["first batch 0"], p.stdout  # (the first line: test_fixes_once's marks)


def test_unpatched_fairseq_aborts_at_exit_while_its_reader_works():
    """Documents what the fix is for: without it the same process aborts (SIGABRT) at exit."""
    p = training_process.run("unfixed")
    assert p.returncode == -6 and "terminate called without an active exception" in p.stderr, p.stderr[-2000:]
    assert p.stdout == "first batch 0\n"


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


# ------------------------------------------------------------ the fp16 loss scaler across a resume
def _fp16_optimizer(params):
    """fairseq's --memory-efficient-fp16 Adam (its fp16 optimizer that runs on CPU), a scale
    window of 3 updates from a scale of 4; the configuration fairseq-train gives it."""
    from fairseq.optim import MemoryEfficientFP16Optimizer
    from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig
    from omegaconf import OmegaConf

    adam = OmegaConf.structured(FairseqAdamConfig(lr=[0.01], tpu=False))
    cfg = OmegaConf.create({"optimizer": adam, "optimization": {"update_freq": [1]},
                            "common": {"fp16_scale_window": 3, "fp16_init_scale": 4, "fp16_scale_tolerance": 0.0,
                                       "threshold_loss_scale": None, "min_loss_scale": 1e-4, "bf16": False}})
    return MemoryEfficientFP16Optimizer(cfg, params, FairseqAdam(cfg.optimizer, params))


def _fp16_updates(optimizer, param, n):
    """``n`` updates as fairseq's trainer makes them (an overflow skips the step); the scale after each."""
    scales = []
    for _ in range(n):
        optimizer.zero_grad()
        optimizer.backward((param.float() * 30).pow(2).sum())  # gradients ~4e3: a scale of 32 overflows fp16
        try:
            optimizer.clip_grad_norm(0.0)
            optimizer.step()
        except OverflowError:
            pass
        scales.append(optimizer.scaler.loss_scale)
    return scales


def test_a_resumed_fp16_run_rescales_at_the_updates_of_the_uninterrupted_one():
    import io

    import torch

    start = torch.linspace(0.5, 2.0, 8, dtype=torch.float16)
    param = torch.nn.Parameter(start.clone())
    uninterrupted = _fp16_updates(_fp16_optimizer([param]), param, 12)
    assert max(uninterrupted) > 4 and uninterrupted[-1] < max(uninterrupted)  # it grew, and an overflow cut it

    first = torch.nn.Parameter(start.clone())
    optimizer = _fp16_optimizer([first])
    scales = _fp16_updates(optimizer, first, 4)  # killed after update 4: its next growth is due at 6
    buffer = io.BytesIO()  # a checkpoint's round trip: the optimizer state, then a new process's optimizer
    torch.save(optimizer.state_dict(), buffer)
    resumed = torch.nn.Parameter(first.detach().clone())
    optimizer = _fp16_optimizer([resumed])
    optimizer.load_state_dict(torch.load(io.BytesIO(buffer.getvalue())))
    scales += _fp16_updates(optimizer, resumed, 8)
    assert scales == uninterrupted
    assert torch.equal(resumed, param)
