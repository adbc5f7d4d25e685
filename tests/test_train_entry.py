"""The recipes' training entry point stops fairseq's DataLoader workers when training is over."""

import multiprocessing
import time

import torch
from torch.utils.data import DataLoader, _utils

from fairseq_attn_recipes.train import release_data_workers


def test_workers_of_unreferenced_iterators_are_stopped_and_the_interval_restored():
    loader = DataLoader(torch.arange(64.0), batch_size=4, num_workers=1)
    it = iter(loader)
    next(it)
    holder = {"it": it}
    holder["self"] = holder  # a cycle, as fairseq's iterators are held: only the collector frees it
    del it, holder
    assert multiprocessing.active_children()  # the worker still runs
    before = _utils.MP_STATUS_CHECK_INTERVAL
    t0 = time.monotonic()
    release_data_workers()
    # stopped (terminated after the 0.1 s wait); a loaded machine may take a moment to reap the
    # process (3 s were once too few at a load of 6), but less than the 5 s torch's own stop waits first
    while multiprocessing.active_children() and time.monotonic() - t0 < 4.5:
        time.sleep(0.05)
    assert not multiprocessing.active_children()
    assert _utils.MP_STATUS_CHECK_INTERVAL == before
