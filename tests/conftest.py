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
_REPO_ENTRIES = pytest.StashKey[frozenset]()
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: what a test run may add to the repository root (pytest's and Python's own caches)
_RUN_CACHES = {".pytest_cache", "__pycache__"}


#: the slowest tests (seconds of the last full run, on its 2 cores): started first, longest first
SLOWEST = {
    "tests/test_lengths_study.py::test_quick_study_trains_short_tests_long_and_reports_by_length": 92,
    "tests/test_table1.py::test_table1_recipe_end_to_end": 70,
    "tests/test_demo.py::test_demo_quick_end_to_end_kill_resume_and_rerun": 60,
    "tests/test_recipe_seeds.py::test_seeds_train_resume_evaluate_and_curves": 56,
    # the first of the group ende_trained_run: its tests (on copies of one run) go to one worker, about 150 s
    "tests/test_evaluation_reuse.py::test_the_same_evaluation_is_skipped_and_a_changed_one_redone": 37,
    "tests/test_table1.py::test_figure2_recipe": 37,
    "tests/test_recipe_integrity.py::test_zhen_all_public_parts_pair_count_and_paper_settings_reach_scores_and_table": 36,
    "tests/test_recipe_refusals.py::test_prune_shows_then_removes_only_with_yes_and_sees_runs_outside_work": 32,
    "tests/test_prepare_refusals.py::test_a_users_data_tmp_is_refused_and_a_killed_binarise_leftover_removed": 26,
    "tests/test_recipe_integrity.py::test_failed_aspec_extraction_marks_nothing_done_and_a_rerun_recovers": 21,
    "tests/test_recipe_data_folders.py::test_train_max_len_drops_the_long_training_sources_only": 15,
    "tests/test_recipe_integrity.py::test_downloaded_corpora_are_checked_truncated_or_misaligned_archives_stop_raw": 15,
}


def pytest_configure(config):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not hasattr(config, "workerinput"):  # the controlling process, or a run without workers
        config.stash[_ROOT] = os.environ[shared_builds.ENV] = tempfile.mkdtemp(prefix="attn_tests_shared_")
        config.stash[_REPO_ENTRIES] = frozenset(os.listdir(_REPO))
        # --dist loadgroup hands out work in the order of the collection (below), not the groups
        # with the most tests first
        if hasattr(config.option, "loadscopereorder"):
            config.option.loadscopereorder = False
        if getattr(config.option, "numprocesses", None):  # workers will collect: rewritten for them once
            _compile_test_modules(config)


def _compile_test_modules(config):
    """The test modules rewritten for pytest's assertions, and the helpers compiled, once per run
    into ``tests/__pycache__``, before any worker collects. With PYTHONDONTWRITEBYTECODE set (as
    here) pytest rewrites every test module in every worker (about 5 s of CPU each) and Python
    compiles every helper in every process that imports it; both read the files written here
    (pytest's own cache file and checks: a module changed since is rewritten as before)."""
    import compileall
    from pathlib import Path

    try:  # pytest's own functions (pytest < 9, requirements.txt); without them, each worker rewrites
        from _pytest.assertion import assertstate_key
        from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc, get_cache_dir
    except ImportError:
        return
    state = config.stash.get(assertstate_key, None)
    if state is None or config.getoption("assertmode") != "rewrite":
        return
    here = Path(__file__).resolve().parent
    for fn in sorted(here.glob("*.py")):
        if not fn.name.startswith("test_"):
            compileall.compile_file(str(fn), quiet=2)
            continue
        pyc = get_cache_dir(fn) / (fn.name[:-3] + PYC_TAIL)
        try:
            if _read_pyc(fn, pyc) is None:
                pyc.parent.mkdir(exist_ok=True)
                stat, co = _rewrite_test(fn, config)
                _write_pyc(state, co, stat, pyc)
        except (OSError, SyntaxError, ValueError):  # left to the collection, which reports it as before
            continue


def pytest_sessionfinish(session, exitstatus):
    """A test that writes into the repository root (e.g. fairseq's default ``checkpoints/`` of a
    training without ``--save-dir``) fails the run, naming what it left there."""
    before = session.config.stash.get(_REPO_ENTRIES, None)
    if before is None:
        return
    new = sorted(set(os.listdir(_REPO)) - before - _RUN_CACHES)
    if new:
        session.config.get_terminal_writer().line(
            f"the tests left {', '.join(new)} in the repository root {_REPO}: a test or the code it runs "
            "writes into the current folder", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    root = config.stash.get(_ROOT, None)
    if root:
        shutil.rmtree(root, ignore_errors=True)


def pytest_collection_finish(session):
    """What collection loaded (torch, fairseq, the test modules: millions of objects) frozen out of
    the garbage collector's generations (``gc.freeze``): every full collection a test triggers
    otherwise walks them all again; what the tests make is collected as before."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    import torch
    torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="session")
def _registry_names_read_here():
    """The lists the steps' and commands' processes read from fairseq's registry (the names' cache,
    :mod:`fairseq_attn_reports.arch_names`, keyed by the code) read in this process, which has
    imported fairseq and the plugin already (collection): the first step to need one would import
    them for it (3 s of CPU), in each worker at once. Nothing read where they are not imported."""
    if "fairseq_attn_plugins.models" in sys.modules:
        from fairseq_attn_recipes import demo_archs
        from fairseq_attn_reports import arch_names, declared_pieces

        arch_names.registered_arch_names(), demo_archs.registered_archs(), declared_pieces.piece_flag_names()


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own, which names each test's group
def pytest_collection_modifyitems(config, items):
    """The slowest tests first, longest first (:data:`SLOWEST`), then the other end-to-end runs and
    the groups sharing an expensive fixture: they are the long tests, and pytest-xdist hands out
    tests in this order (``loadscopereorder`` off), so starting them first keeps one of them from
    being the last thing running (longest first is close to the best order for the slowest
    worker). Stable otherwise.

    Tests of one ``xdist_group`` share a module fixture that is expensive to make: a pytest
    that loses the group (pytest-xdist names it in the test's node id) would make it once per
    worker, silently, so that is refused."""
    if getattr(config.option, "loadgroup", False):
        lost = [i.nodeid for i in items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
        if lost:
            raise pytest.UsageError(f"pytest-xdist --dist loadgroup lost the group of {lost[0]} (and "
                                    f"{len(lost) - 1} more) with pytest {pytest.__version__}: see requirements.txt")
    items.sort(key=lambda item: (-SLOWEST.get(item.nodeid.split("@")[0], 0),
                                 item.get_closest_marker("e2e") is None
                                 and item.get_closest_marker("xdist_group") is None))
