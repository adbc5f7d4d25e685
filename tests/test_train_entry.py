"""The recipes' training entry point stops fairseq's DataLoader workers when training is over."""

import multiprocessing

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
    release_data_workers()
    assert not multiprocessing.active_children()
    assert _utils.MP_STATUS_CHECK_INTERVAL == before
