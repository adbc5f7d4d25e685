"""Low-noise measuring: GPU-side timers, peak memory, interleaved rounds, ratio spread.

* :class:`Timer` times the GPU work with CUDA events (recorded on the stream, read after
  one synchronisation: no host overhead inside the measurement); on CPU it falls back to
  ``time.perf_counter``.
* every ratio is the median of paired per-round ratios, printed with its **spread**:
  ``(max - min) / (2 * median)`` of those per-round ratios, i.e. "+-x %". A ratio whose
  spread exceeds :data:`MAX_SPREAD` (+-3 %) is **unmeasured**: no PASS/MISS is judged on it.
"""

import contextlib
import ctypes
import gc
import os
import statistics
import threading
import time
from typing import Dict, List, Optional

import torch

# ---------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------
def sync_device(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PeakMemory:
    """Transient peak memory of a block: CUDA max allocated, or sampled RSS on CPU."""

    def __init__(self, device):
        self.device = device
        self.peak_bytes = 0

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.before = torch.cuda.memory_allocated(self.device)
        else:
            gc.collect()
            _malloc_trim()
            self.before = _rss()
            self._peak = self.before
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self._peak = max(self._peak, _rss())
            time.sleep(0.002)

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device) - self.before
        else:
            self._stop.set()
            self._thread.join()
            self._peak = max(self._peak, _rss())
            self.peak_bytes = self._peak - self.before
        return False


def timed_peak(device):
    """The peak memory a timed block can measure without cost: CUDA's counters (a
    :class:`PeakMemory`); on CPU nothing (``None``): RSS sampling runs a thread beside the timed
    work, so a CPU sweep takes its memory from :class:`TensorPeak` in a pass of its own."""
    return PeakMemory(device) if device.type == "cuda" else contextlib.nullcontext()


class TensorPeak:
    """Peak bytes of live tensors allocated inside a block, from torch's own allocation
    records (``torch.profiler`` with ``profile_memory``: every allocation and free of the
    CPU allocator, replayed in time order). Unlike RSS it sees short-lived peaks and no
    allocator caching, and counts only what the block allocates (the model's weights and
    inputs, allocated before, are not in it). Used for the CPU length sweep; it slows the
    block down, so it is measured in a pass of its own, never in a timed one."""

    def __init__(self):
        self.peak_bytes = 0

    def __enter__(self):
        from torch.profiler import ProfilerActivity, profile

        gc.collect()
        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._prof.__enter__()
        return self

    def __exit__(self, *exc):
        self._prof.__exit__(*exc)
        events = sorted((e.start_ns(), e.nbytes()) for e in self._prof.profiler.kineto_results.events()
                        if e.name() == "[memory]")
        live = 0
        for _, nbytes in events:
            live += nbytes
            self.peak_bytes = max(self.peak_bytes, live)
        return False


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: ru_maxrss cannot show per-system growth
        return 0


def _malloc_trim():
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


#: a ratio whose per-round spread exceeds +-3 % is reported as unmeasured
MAX_SPREAD = 0.03


def spread(values: List[float]) -> float:
    """Half the range of the per-round values relative to their median: the "+-x" of a ratio."""
    return (max(values) - min(values)) / (2 * statistics.median(values))


def is_measured(summary: dict, max_spread: float = MAX_SPREAD) -> bool:
    return len(summary["runs"]) >= 2 and summary["spread"] <= max_spread


def summarize(values: List[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "spread": spread(values), "runs": list(values)}


def paired_ratios(sys_runs: List[float], ref_runs: List[float]) -> dict:
    """Paired per-round ratios (a system / its reference in the same round) and their median/min/max."""
    r = [a / b for a, b in zip(sys_runs, ref_runs)]
    return summarize(r)


@contextlib.contextmanager
def collector_paused():
    """timeit's practice around one measurement: garbage collected before, the collector off
    inside (a collection's pause is not the system's time), back as it was after, also on error."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def long_lived_frozen():
    """What exists now (the models, optimizers, batches: alive until the block ends) frozen out of
    the collector (``gc.freeze``), so each collection inside walks only what the block made.
    Unfrozen after, also on error, unless the caller had frozen objects itself: ``gc.unfreeze``
    cannot tell its objects from ours, so they all stay frozen (those in no reference cycle are
    still freed when no longer referenced: the models and optimizers are)."""
    gc.collect()
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()


def interleaved(systems: List[str], repeats: int, measure, log=print) -> Dict[str, List]:
    """Round r measures every system once, the order rotated by r. Each measurement runs in
    :func:`collector_paused`, the rounds in :func:`long_lived_frozen`."""
    runs = {s: [] for s in systems}
    with long_lived_frozen():
        for r in range(repeats):
            order = systems[r % len(systems):] + systems[: r % len(systems)]
            for s in order:
                with collector_paused():
                    runs[s].append(measure(s, r))
            log(f"  round {r + 1}/{repeats} done")
    return runs


def target_status(ratio: dict, target: Optional[float], higher_is_better=True) -> str:
    """PASS / MISS against ``target``, or "unmeasured" when the ratio's spread exceeds
    +-3 % (or it has fewer than 2 rounds): a noisy ratio is never judged."""
    if target is None:
        return "n/a"
    if not is_measured(ratio):
        return "unmeasured"
    ok = ratio["median"] >= target if higher_is_better else ratio["median"] <= target
    return "PASS" if ok else "MISS"


def fmt_ratio(ratio: dict) -> str:
    """``0.934 +-1.2%`` (median of per-round ratios and their spread)."""
    return f"{ratio['median']:.3f} +-{100 * ratio['spread']:.1f}%"


class Timer:
    """Seconds of device work between ``start()`` and ``stop()``.

    CUDA: events recorded on the current stream, read after one synchronisation, so the
    figure is GPU time, not host launch overhead. CPU: ``time.perf_counter``."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"

    def start(self):
        if self.cuda:
            self._a = torch.cuda.Event(enable_timing=True)
            self._b = torch.cuda.Event(enable_timing=True)
            self._a.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def stop(self) -> float:
        if self.cuda:
            self._b.record()
            self._b.synchronize()
            return self._a.elapsed_time(self._b) / 1000.0
        return time.perf_counter() - self._t0


