"""Learning curves from fairseq-train's own json logs (``--log-format json``).

One reader, :func:`read_log_records`, serves the results table
(:func:`fairseq_attn_reports.results.parse_train_log`), the demo's plot,
``fairseq-attn-results --curves`` and the validation losses that say where fairseq's ``--patience``
stops a run (:func:`patience_stop`: the resumed counter, a run trained past its stop). A log line of interest looks like::

    2026-11-23 13:04:38 | INFO | train_inner | {"epoch": 1, ..., "num_updates": "2", "wall": "1"}
    2026-11-23 13:04:38 | INFO | valid | {"epoch": 1, "valid_loss": "8.384", "valid_bleu": "0", "valid_num_updates": "4"}
    2026-11-23 13:04:39 | INFO | train | {"epoch": 1, "train_loss": "8.46", ..., "train_num_updates": "5", "train_wall": "2"}

Curves of one run (:func:`run_curves`): points ``(updates, wall_seconds, value)`` for

* ``train_loss``: the ``train_inner`` records (every ``--log-interval`` updates); a log
  without them (interval longer than an epoch, as the demo's) uses the per-epoch ``train``
  averages instead;
* ``valid_loss`` and, when fairseq logged it (``--eval-bleu``), ``valid_bleu``.

Wall-clock time is fairseq's own ``wall`` meter (seconds since the process started, whole
seconds). fairseq restarts it when a run resumes, so each resume ("Loaded checkpoint ...
@ K updates") adds the last time seen before it: the axis is the total time spent
training, downtime excluded, time lost to an interruption included. The same resume
truncates every curve to the updates <= K (the later, resumed records win).

fairseq logs no wall time for validation, and its training records' wall times are whole
seconds. A validation point is placed at its elapsed time since the training start
(:func:`place_on_wall_clock`): interpolated by update on the run's clock, a line through the
training start (0 updates at 0 s: fairseq's ``wall`` meter starts with the trainer, before the
first update), each resume (K updates at the time spent so far) and the training records
(``train_inner`` and the epoch's ``train``), each new whole second at the first update that logged
it. Taking a training record's time instead would put every validation before the first record
(the demo's first epoch: no ``train_inner``) or between two records at one time, and draw
vertical drops in the wall-clock panels.

Seeds as bands (:func:`seed_band`): mean and sample standard deviation (n - 1) over
the seeds of one system at every update that all of them logged; the time axis of
the band is the mean wall time over the seeds at that update.
"""

import json
import math
import os
import re
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from fairseq_attn_records.output_files import staged

_LINE = re.compile(r"\| (train_inner|train|valid) \| (\{.*\})\s*$")
_PARAMS = re.compile(r"num\. shared model params: ([\d,]+)")
_RESUME = re.compile(r"Loaded checkpoint .* \(epoch \d+ @ (\d+) updates\)")

CURVES = ("train_loss", "valid_loss", "valid_bleu")
Point = Tuple[int, float, float]  # (updates, wall seconds, value)


def read_log_records(path: str) -> Iterator[Tuple[str, Dict]]:
    """Records of a fairseq-train log in file order: ``("params", {"params": N})``,
    ``("resume", {"num_updates": K})`` and ``(kind, stats)`` for kind in
    ``train_inner`` / ``train`` / ``valid`` (stats as fairseq wrote them, strings)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _LINE.search(line)
            if m:
                yield m.group(1), json.loads(m.group(2))
                continue
            m = _PARAMS.search(line)
            if m:
                yield "params", {"params": int(m.group(1).replace(",", ""))}
                continue
            m = _RESUME.search(line)
            if m:
                yield "resume", {"num_updates": int(m.group(1))}


def validation_losses(log_path: str, upto: Optional[int] = None) -> List[Tuple[int, float]]:
    """``[(updates, valid_loss)]`` of a train.log, oldest first, the validations at <= ``upto`` updates
    (all: None); a validation logged again after a resume: the later record."""
    by_update = {}
    for kind, st in read_log_records(log_path):
        if kind == "valid" and "valid_loss" in st:
            u = int(float(st["valid_num_updates"]))
            if upto is None or u <= upto:
                by_update[u] = float(st["valid_loss"])
    return sorted(by_update.items())


def patience_counts(losses: Sequence[Tuple[int, float]]) -> Iterator[Tuple[int, float, int]]:
    """``(updates, best loss, validations since it improved)`` after each validation, as fairseq's
    ``should_stop_early`` counts them (lower is better; an equal loss does not improve)."""
    best, runs = None, 0
    for u, loss in losses:
        if best is None or loss < best:
            best, runs = loss, 0
        else:
            runs += 1
        yield u, best, runs


def patience_stop(losses: Sequence[Tuple[int, float]], patience: int) -> Optional[int]:
    """The update at which fairseq's ``--patience`` stops a training with these validation losses
    (the first validation after ``patience`` without improvement), or None: not yet."""
    return next((u for u, _, runs in patience_counts(losses) if runs >= patience), None)


def _append(series: List[Point], point: Point) -> None:
    while series and series[-1][0] >= point[0]:  # a later record of the same update wins
        series.pop()
    series.append(point)


def run_curves(path: str) -> Dict[str, List[Point]]:
    """``{"train_loss": [...], "valid_loss": [...], "valid_bleu": [...]}`` of one train.log."""
    inner: List[Point] = []
    epoch_train: List[Point] = []
    valid = {"valid_loss": [], "valid_bleu": []}
    offset = last_wall = 0.0  # wall-clock of earlier processes (resumes) / of the latest record
    starts: List[Point] = [(0, 0.0, math.nan)]  # the training start and each resume: knots of the clock

    for kind, st in read_log_records(path):
        if kind == "resume":
            offset = last_wall
            k = st["num_updates"]
            starts = [p for p in starts if p[0] < k] + [(k, offset, math.nan)]
            for s in [inner, epoch_train] + list(valid.values()):
                s[:] = [p for p in s if p[0] <= k]
        elif kind == "train_inner":
            last_wall = offset + float(st["wall"]) if "wall" in st else last_wall
            _append(inner, (int(float(st["num_updates"])), last_wall, float(st["loss"])))
        elif kind == "train":
            last_wall = offset + float(st["train_wall"]) if "train_wall" in st else last_wall
            _append(epoch_train, (int(float(st["train_num_updates"])), last_wall, float(st["train_loss"])))
        elif kind == "valid":
            u = int(float(st["valid_num_updates"]))
            for key in valid:
                if key in st:
                    _append(valid[key], (u, last_wall, float(st[key])))
    anchors = starts + inner + epoch_train
    valid = {k: place_on_wall_clock(v, anchors) for k, v in valid.items()}
    return {"train_loss": inner or epoch_train, **valid}


def place_on_wall_clock(points: Sequence[Point], anchors: Sequence[Point]) -> List[Point]:
    """Validation points at their elapsed time since the training start, read off the run's
    clock through ``anchors`` (the training start, resumes and training records).

    The clock's knots are the updates whose latest record shows a later time than the knot
    before (the log's times are whole seconds: records repeating the previous knot's second,
    or going back, add nothing). A point at a knot's update takes its latest record's time
    (a validation runs before the record of its update is logged); a point between two knots
    is interpolated linearly by update from the earlier knot's latest time to the later
    knot's earliest time (its latest where the earliest is no later than the earlier knot:
    the validation and saving logged between a ``train_inner`` and the epoch's ``train`` record
    at one update are not spread over the updates before); before the first knot, its
    earliest time; after the last, the last two knots' rate goes on. Validations at
    increasing updates so get strictly increasing times whenever the log holds two knots."""
    if not anchors:
        return list(points)
    first: Dict[int, float] = {}
    last: Dict[int, float] = {}
    for u, wall, _ in anchors:
        first[u] = min(wall, first.get(u, wall))
        last[u] = max(wall, last.get(u, wall))
    knots: List[int] = []
    for u in sorted(last):
        if not knots or last[u] > last[knots[-1]]:
            knots.append(u)
    out = []
    for u, _, value in points:
        later = [k for k in knots if k >= u]
        if later and later[0] == u:
            wall = last[u]
        elif later and later[0] == knots[0]:
            wall = first[knots[0]]
        elif later:
            u0, u1 = knots[knots.index(later[0]) - 1], later[0]
            end = first[u1] if first[u1] > last[u0] else last[u1]
            wall = last[u0] + (end - last[u0]) * (u - u0) / (u1 - u0)
        elif len(knots) == 1:
            wall = last[knots[0]]
        else:  # after the last knot: the rate of the last two goes on
            u0, u1 = knots[-2], knots[-1]
            wall = last[u1] + (last[u1] - last[u0]) * (u - u1) / (u1 - u0)
        out.append((u, wall, value))
    return out


def mean_std(values: Sequence[float]) -> Tuple[float, float]:
    """Mean and sample standard deviation (n - 1; 0.0 for a single value)."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_std of no values")
    mean = math.fsum(values) / n
    if n == 1:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))


def seed_band(series: Sequence[Sequence[Point]]) -> List[Tuple[int, float, float, float]]:
    """``(updates, mean wall, mean, std)`` over the seeds' curves, at the updates all logged."""
    if not series:
        return []
    common = set(p[0] for p in series[0])
    for s in series[1:]:
        common &= set(p[0] for p in s)
    by_update = [{p[0]: p for p in s} for s in series]
    out = []
    for u in sorted(common):
        wall, _ = mean_std([d[u][1] for d in by_update])
        mean, std = mean_std([d[u][2] for d in by_update])
        out.append((u, wall, mean, std))
    return out


def plot_curves(groups: Sequence[Tuple[str, Sequence[str]]], png_path: str) -> Dict:
    """Draw every system's curves against updates (top row) and wall-clock time (bottom
    row); ``groups``: (system name, [run dirs, one per seed]). Several seeds: mean line
    and a mean ± std band. Returns the plotted data ``{system: {curve: band}}``."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq's import leaves DEBUG on
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {}
    for name, runs in groups:
        per_run = []
        for d in runs:
            log = os.path.join(d, "train.log")
            if not os.path.isfile(log):
                raise FileNotFoundError(f"run {name!r}: {log} is missing (train the run first)")
            per_run.append(run_curves(log))
        data[name] = {c: seed_band([r[c] for r in per_run]) for c in CURVES}
    curves = [c for c in CURVES if any(data[n][c] for n in data)]
    if not curves:
        raise ValueError("no training or validation records in the logs (were they written with --log-format json?)")
    titles = {"train_loss": "training loss", "valid_loss": "validation loss", "valid_bleu": "validation BLEU"}
    fig, axes = plt.subplots(2, len(curves), figsize=(5 * len(curves), 7), squeeze=False)
    hours = max((b[-1][1] for n in data for b in data[n].values() if b), default=0) > 3 * 3600
    for i, (name, runs) in enumerate(groups):
        color = f"C{i % 10}"  # one colour per system in every panel
        for col, c in enumerate(curves):
            band = data[name][c]
            if not band:
                continue
            for row, x_of in enumerate((lambda b: b[0], lambda b: b[1] / (3600 if hours else 1))):
                ax = axes[row][col]
                xs = [x_of(b) for b in band]
                mean = [b[2] for b in band]
                ax.plot(xs, mean, color=color, marker="o" if len(band) < 30 else None, markersize=3,
                        label=f"{name} (mean of {len(runs)} seeds)" if len(runs) > 1 else f"{name} (1 seed)")
                if len(runs) > 1:
                    ax.fill_between(xs, [b[2] - b[3] for b in band], [b[2] + b[3] for b in band],
                                    color=color, alpha=0.25, linewidth=0)
    for col, c in enumerate(curves):
        for row, xlabel in enumerate(("updates", "wall-clock " + ("hours" if hours else "seconds"))):
            ax = axes[row][col]
            ax.set_xlabel(xlabel)
            ax.set_ylabel("BLEU" if c == "valid_bleu" else "loss (base 2, as logged)")
            ax.set_title(titles[c])
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    n_runs = [len(runs) for _, runs in groups]
    if max(n_runs) == 1:
        title = "one seed per system: lines, no bands (seeds give mean ± std bands)"
    elif min(n_runs) == 1:
        title = "bands: mean ± sample std (n-1) over seeds; a system with one seed: a line without band"
    else:
        title = "bands: mean ± sample std (n-1) over seeds"
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    with staged(png_path, ".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return data
