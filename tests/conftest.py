"""Run-wide set-up for every test process, pytest-xdist workers included.

The controlling process creates the folder where things made once per run live
(:mod:`shared_builds`) and hands it to the workers through the environment; it deletes it
at the end. Each process runs torch on one thread: the workers share the cores, and torch's
default (every core in every process) makes two processes slow each other down many times over.
"""

import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import shared_builds  # noqa: E402

_ROOT = pytest.StashKey[str]()


def pytest_configure(config):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not hasattr(config, "workerinput"):  # the controlling process, or a run without workers
        config.stash[_ROOT] = os.environ[shared_builds.ENV] = tempfile.mkdtemp(prefix="attn_tests_shared_")


def pytest_unconfigure(config):
    root = config.stash.get(_ROOT, None)
    if root:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    import torch
    torch.set_num_threads(1)


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own, which names each test's group
def pytest_collection_modifyitems(config, items):
    """The end-to-end runs and the groups sharing an expensive fixture first: they are the long
    tests, and pytest-xdist hands out tests in this order, so starting them first keeps one of
    them from being the last thing running (longest first is close to the best order for the
    slowest worker). Stable otherwise.

    Tests of one ``xdist_group`` share a module fixture that is expensive to make: a pytest
    that loses the group (pytest-xdist names it in the test's node id) would make it once per
    worker, silently, so that is refused."""
    if getattr(config.option, "loadgroup", False):
        lost = [i.nodeid for i in items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
        if lost:
            raise pytest.UsageError(f"pytest-xdist --dist loadgroup lost the group of {lost[0]} (and "
                                    f"{len(lost) - 1} more) with pytest {pytest.__version__}: see requirements.txt")
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None
               and item.get_closest_marker("xdist_group") is None)
