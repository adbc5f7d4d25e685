"""The metrics an MT paper reports today, each with its paired significance tests.

The registry :data:`METRICS` holds one :class:`Metric` row per metric (key, label, direction,
digits, corpus or segment, how to score); significance, results, seeds, Table 1 and the recipes'
scoring step read it and nothing else. A new metric is one :func:`register` call (plus, for a
segment metric, a scorer given to :func:`fairseq_attn_reports.significance.paired_tests`
as ``scorers={key: scorer}``). :func:`corpus_scores` is the one score shape of ``scores.json`` and
of the run record's evaluations.

* **BLEU** (sacreBLEU, detokenised, ``--tokenize``), **chrF++** (sacreBLEU's chrF with
  word n-grams of order 2: ``-m chrf --chrf-word-order 2``) and, with ``--metrics``,
  **TER** (lower is better) are tested as sacreBLEU's :class:`sacrebleu.significance.PairedTest`
  tests them (:func:`sacrebleu_paired_tests`), all metrics in one call: its resamples, trials,
  test statistics and p-values, each resample scored by the metric's own sacreBLEU formula; the
  numbers are those of ``sacrebleu REF -i BASE SYS... -m bleu chrf --chrf-word-order 2
  --paired-bs`` / ``--paired-ar`` on the same files up to float32 rounding (below).
* **Segment-mean metrics** (COMET, :mod:`.comet`): the system score is the mean of the
  segment scores. Their paired tests (:func:`paired_mean_tests`) draw the very
  resampling indices and coin flips that sacreBLEU draws for the same seed
  (``SACREBLEU_SEED``, default 12345) and sentence count, so the p-values of every
  metric come from the same resamples.

Differences from sacreBLEU's output, each deliberate:

* a system whose per-sentence statistics (or segment scores) equal the baseline's gets
  ``p = 1.0`` and ``same_as_baseline``, and so does one whose score equals the baseline's
  exactly (two different outputs both at BLEU 0.0): sacreBLEU counts only the trials whose
  difference *exceeds* the observed one, so where no trial differs it prints the smallest p,
  1/(n+1), for a difference of 0; p = 1 is the share of trials differing by at least 0;
* every resample is summed in float64 and scored from plain Python floats
  (:func:`resampled_scores`), whatever numpy version is installed: sacreBLEU sums float32
  statistics and scores numpy float32 scalars, and numpy 2's promotion rules keep float32
  where numpy 1 went to float64, so its bootstrap means and intervals differ between the two
  (relative 1e-6); here they are the same under both, and every number is a plain float
  (sacreBLEU's own ``-f json`` writer crashes on chrF's float32 in paired mode).
"""

from __future__ import annotations  # (np.ndarray in signatures: numpy is imported by the functions using it)

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    import numpy as np
# numpy and sacreBLEU (about 0.1 and 0.15 s of CPU) are imported by the functions that compute with
# them, not here: a process that reads the registry alone (a table's rows, a variable's check) or
# refuses its arguments before scoring loads neither; a command that only scores loads no numpy


def _sacrebleu():
    from sacrebleu import metrics
    return metrics


@dataclass(frozen=True)
class Metric:
    """One row of the registry: everything a table, a test or a record needs to know of a metric.

    ``level`` is ``"corpus"`` (a sacreBLEU metric object from ``make(tokenize)``, tested through
    sacreBLEU's :class:`PairedTest`, asked for with ``--metrics``), ``"segment"`` (the system
    score is the mean of segment scores given by a scorer, tested by :func:`paired_mean_tests`;
    added when its scorer is given, e.g. COMET with ``COMET_MODEL``) or ``"alignment"`` (AER of
    word alignments against a gold file, the ratio of summed per-sentence link counts, tested
    by :func:`ratio_paired_tests`; added by ``fairseq-attn-results --align``). ``digits``: decimals in
    tables and in the scores recorded for a corpus metric (segment means are recorded whole)."""

    key: str
    label: str
    higher_is_better: bool = True
    digits: int = 2
    level: str = "corpus"
    make: Optional[Callable[[str], object]] = None
    help: str = ""
    needs_source: bool = False  # a segment scorer that reads the source sentences (COMET)


METRICS: Dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    """Add a row (a new metric is this call, plus a scorer for a segment metric)."""
    if metric.level not in ("corpus", "segment", "alignment"):
        raise ValueError(f"metric {metric.key}: level {metric.level!r} is not 'corpus', 'segment' or 'alignment'")
    if (metric.level == "corpus") != (metric.make is not None):
        raise ValueError(f"metric {metric.key}: a corpus metric needs make(tokenize), a segment metric none")
    if metric.key in METRICS:
        raise ValueError(f"metric {metric.key}: registered twice")
    METRICS[metric.key] = metric
    return metric


register(Metric("bleu", "BLEU", make=lambda tokenize: _sacrebleu().BLEU(tokenize=tokenize)))
register(Metric("chrf", "chrF++", make=lambda tokenize: _sacrebleu().CHRF(word_order=2), help="chrF++: word order 2"))
register(Metric("ter", "TER", higher_is_better=False, make=lambda tokenize: _sacrebleu().TER()))
register(Metric("comet", "COMET", digits=4, level="segment", needs_source=True))
register(Metric("aer", "AER", higher_is_better=False, level="alignment",
                help="alignment error rate (%) of cross-attention against gold word alignments "
                     "(fairseq_attn_records.alignment)"))

DEFAULT_METRICS = ("bleu", "chrf")


def corpus_keys() -> List[str]:
    return [k for k, m in METRICS.items() if m.level == "corpus"]


def metrics_help() -> str:
    listed = ", ".join(k + (f" ({m.help})" if m.help else "") for k, m in METRICS.items() if m.level == "corpus")
    return (f"comma-separated sacreBLEU metrics: {listed} "
            f"(default {','.join(DEFAULT_METRICS)}; COMET is added with COMET_MODEL)")


METRICS_HELP = metrics_help()


def get(key: str) -> Metric:
    if key not in METRICS:
        raise ValueError(f"unknown metric {key!r}; registered: {', '.join(METRICS)}")
    return METRICS[key]


def tokenizers() -> List[str]:
    return sorted(_sacrebleu().BLEU.TOKENIZERS)


def check_tokenize(tokenize: str) -> None:
    """``--tokenize`` must be one of sacreBLEU's tokenisers (one line, not a KeyError)."""
    if tokenize not in _sacrebleu().BLEU.TOKENIZERS:
        raise ValueError(f"--tokenize {tokenize}: unknown sacreBLEU tokeniser; one of {', '.join(tokenizers())}")


def parse_metrics(spec) -> List[str]:
    """``"bleu,chrf,ter"`` (or a list) -> checked corpus-metric keys, in the order given."""
    names = [m.strip().lower() for m in (spec.split(",") if isinstance(spec, str) else spec) if m.strip()]
    allowed = corpus_keys()
    bad = [m for m in names if m not in allowed]
    if bad or not names:
        raise ValueError(f"--metrics {','.join(bad) or repr(spec)}: one or more of {', '.join(allowed)} "
                         f"(COMET is added with COMET_MODEL=/path/to/checkpoint)")
    if len(names) != len(set(names)):
        raise ValueError(f"--metrics: a metric is listed twice ({','.join(names)})")
    return names


def make_metric(key: str, tokenize: str = "13a"):
    """The sacreBLEU metric object of a corpus metric, configured as the CLI would be."""
    metric = get(key)
    if metric.make is None:
        raise ValueError(f"metric {key!r} is a segment metric: it has no sacreBLEU object")
    return metric.make(tokenize)


def label(key: str) -> str:
    return METRICS[key].label if key in METRICS else key.upper()


def higher_is_better(key: str) -> bool:
    return METRICS[key].higher_is_better if key in METRICS else True


def digits(key: str) -> int:
    """Decimals a table prints (COMET as comet-score prints it, 0.8531; the others x.xx)."""
    return METRICS[key].digits if key in METRICS else 2


def corpus_scores(refs: Sequence[str], hyps: Sequence[str], metrics: Sequence[str] = DEFAULT_METRICS,
                  tokenize: str = "13a") -> Dict[str, Dict]:
    """``{key: {"score", "signature", "full"}}`` of one system (no resampling): the score shape of
    ``scores.json`` and of the run record's evaluations (``score`` rounded to the metric's
    digits, as sacreBLEU prints it; ``full``: sacreBLEU's line with its signature)."""
    out = {}
    for key in metrics:
        metric = make_metric(key, tokenize)
        s = metric.corpus_score(list(hyps), [list(refs)])
        sig = metric.get_signature().format()
        out[key] = {"score": round(float(s.score), digits(key)), "signature": sig,
                    "full": s.format(signature=sig)}
    return out


class SentenceStats:
    """sacreBLEU's per-sentence sufficient statistics on one reference set, each extracted once.

    The references' n-grams are extracted once per metric, and each system's statistics once per
    metric, however many paired tests (every seed pair of a table) read them; the numbers are the
    ones sacreBLEU computes from the same text (its own extraction, only not repeated). A table
    makes one and passes it to every :func:`sacrebleu_paired_tests` call on these references.
    """

    def __init__(self, refs: Sequence[str], tokenize: str = "13a"):
        check_tokenize(tokenize)
        self.refs, self.tokenize = list(refs), tokenize
        self._metrics: Dict[str, object] = {}
        self._stats: Dict[Tuple[str, Tuple[str, ...]], list] = {}

    def metric(self, key: str):
        """The metric object of ``key`` with the references' information cached in it."""
        if key not in self._metrics:
            m = make_metric(key, self.tokenize)
            m._ref_cache = m._cache_references([self.refs])  # sets its nrefs, as a call with references does
            self._metrics[key] = m
        return self._metrics[key]

    def stats(self, key: str, hyps: Sequence[str]) -> list:
        """The per-sentence statistics of ``hyps`` on ``key`` (sacreBLEU's ``_extract_corpus_statistics``)."""
        k = (key, tuple(hyps))
        if k not in self._stats:
            if len(hyps) != len(self.refs):
                raise ValueError(f"{len(hyps)} output lines but the reference has {len(self.refs)}")
            self._stats[k] = self.metric(key)._extract_corpus_statistics(list(hyps), None)
        return self._stats[k]

    def length_ratio(self, hyps: Sequence[str]) -> Dict:
        """:func:`length_ratio` from the BLEU statistics held here."""
        return _ratio_of(self.metric("bleu")._aggregate_and_compute(self.stats("bleu", hyps)))


def length_ratio(refs: Sequence[str], hyps: Sequence[str], tokenize: str = "13a") -> Dict:
    """The output/reference length ratio sacreBLEU's BLEU prints (``ratio = sys_len / ref_len``,
    tokens of its tokeniser, the brevity penalty's input): ``{"sys_len", "ref_len", "ratio"}``
    (ratio None for an empty reference). Below 1 the outputs are shorter than the references."""
    return _ratio_of(make_metric("bleu", tokenize).corpus_score(list(hyps), [list(refs)]))


def _ratio_of(bleu) -> Dict:
    """``{"sys_len", "ref_len", "ratio"}`` of a sacreBLEU BLEU score (ratio None for an empty reference)."""
    return {"sys_len": int(bleu.sys_len), "ref_len": int(bleu.ref_len),
            "ratio": float(bleu.sys_len) / float(bleu.ref_len) if bleu.ref_len else None}


def segment_score(segments: Sequence[float], signature: str) -> Dict:
    """The recorded score of a segment metric: the mean, its signature and the segment scores."""
    return {"score": sum(segments) / len(segments), "signature": signature, "segments": list(segments)}


def _float(v) -> Optional[float]:
    return None if v is None else float(v)


def sacrebleu_paired_tests(refs: Sequence[str], systems: Sequence[Tuple[str, Sequence[str]]],
                           metrics: Sequence[str] = DEFAULT_METRICS, tokenize: str = "13a",
                           bs_samples: int = 1000, ar_trials: int = 10000,
                           stats: Optional[SentenceStats] = None) -> Dict:
    """Paired bootstrap and approximate randomisation of every sacreBLEU metric at once;
    ``systems[0]`` is the baseline. ``stats``: the per-sentence statistics on these references
    (:class:`SentenceStats`), shared by the calls of one table; a new one when None.

    sacreBLEU's tests (its ``PairedTest``: the same draws, counts and p-values) with its metric's own
    scoring of each resample, the statistics summed in float64 (:func:`paired_stat_tests`).

    Returns ``{"metrics": [keys], "signature": {key: {"bs": str, "ar": str}},
    "systems": [{"name", "scores": {key: {"score", "bs_mean", "bs_ci", "p_bootstrap",
    "p_ar", "same_as_baseline"}}}]}``; the baseline has no p-values.
    """
    import numpy as np

    if len(systems) < 2:
        raise ValueError("need a baseline and at least one system to compare")
    if not refs:
        raise ValueError("the reference is empty")
    check_tokenize(tokenize)
    for name, hyps in systems:
        if len(hyps) != len(refs):
            raise ValueError(f"{name}: {len(hyps)} lines but the reference has {len(refs)}")
    stats = SentenceStats(refs, tokenize) if stats is None else stats
    if stats.refs != list(refs) or stats.tokenize != tokenize:
        raise ValueError("the statistics given were extracted on other references or with another tokeniser")
    named = [(name, list(hyps)) for name, hyps in systems]
    out = {"metrics": list(metrics), "signature": {k: {} for k in metrics},
           "systems": [{"name": name, "scores": {k: {} for k in metrics}} for name, _ in named]}
    for key in metrics:
        metric = stats.metric(key)
        per_system = [stats.stats(key, hyps) for _, hyps in named]
        cells = paired_stat_tests([np.asarray(st, dtype=np.float64) for st in per_system], score_of(metric),
                                  bs_samples, ar_trials,
                                  scores=[float(metric._aggregate_and_compute(st).score) for st in per_system])
        out["systems"][0]["scores"][key] = dict(cells[0], p_bootstrap=None, p_ar=None)
        for row, st, cell in zip(out["systems"][1:], per_system[1:], cells[1:]):
            cell.pop("same_as_baseline")  # identical per-sentence statistics: no difference to test
            row["scores"][key] = {"same_as_baseline": st == per_system[0], **cell}
        out["signature"][key] = {"bs": test_signature(metric, "bs", bs_samples),
                                 "ar": test_signature(metric, "ar", ar_trials)}
    return out


def score_of(metric) -> Callable[[list], float]:
    """The score of summed statistics (plain Python floats) by a sacreBLEU metric's own formula."""
    return lambda summed: float(metric._compute_score_from_stats(summed).score)


def test_signature(metric, test: str, n: int) -> str:
    """The signature sacreBLEU's ``PairedTest`` prints for ``test`` ("bs" or "ar") with ``n`` resamples or trials."""
    sig = metric.get_signature()
    sig.update("seed", str(sacrebleu_seed()[0]).lower())
    sig.update(test, n)
    return sig.format()


# -- segment-mean metrics (COMET): sacreBLEU's draws, reproduced ----------------------

def sacrebleu_seed() -> Tuple[Optional[int], str]:
    """(seed, as the signature prints it) from ``SACREBLEU_SEED`` (default 12345; 'none':
    entropy from the OS, so nothing is reproducible and no draw is shared)."""
    seed = os.environ.get("SACREBLEU_SEED", "12345")
    return (None if seed.lower() == "none" else int(seed)), seed.lower()


def bootstrap_indices(n_items: int, n_samples: int, comparison: bool = True) -> np.ndarray:
    """The (n_samples, n_items) resampling indices sacreBLEU draws: in a comparison
    (``_paired_bs_test``: ``default_rng(seed or None)``), or for the baseline's own
    confidence interval (``_bootstrap_resample``: ``default_rng(seed)``; the two differ
    only for seed 0)."""
    import numpy as np

    seed, _ = sacrebleu_seed()
    rng = np.random.default_rng((seed if seed else None) if comparison else seed)
    return rng.choice(n_items, size=(n_samples, n_items), replace=True)


def ar_selectors(n_items: int, n_trials: int) -> np.ndarray:
    """The (n_trials, n_items) coin flips of sacreBLEU's ``_paired_ar_test`` (True: the
    pseudo-system A takes the baseline's sentence)."""
    import numpy as np

    seed, _ = sacrebleu_seed()
    rng = np.random.default_rng(seed if seed else None)
    return rng.integers(2, size=(n_trials, n_items), dtype=bool)


def estimate_ci(scores: Sequence[float]) -> Tuple[float, float]:
    """sacreBLEU's bootstrap mean and 95% half-width (its ``estimate_ci``), the mean correctly rounded
    (``math.fsum``: no summation order of any numpy version)."""
    s = sorted(float(v) for v in scores)
    lower = len(s) // 40
    return _mean(s), 0.5 * (s[len(s) - lower - 1] - s[lower])


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _p_value(stats: np.ndarray, real_difference: float) -> float:
    """sacreBLEU's ``_compute_p_value``: (count of stats > difference + 1) / (n + 1)."""
    import numpy as np

    return (int(np.sum(stats > real_difference)) + 1) / (len(stats) + 1)


def _mean_stats(segments: Sequence[float]) -> np.ndarray:
    """A segment-mean metric as sacreBLEU's sufficient statistics: (score, 1) per segment."""
    import numpy as np

    return np.array([[float(v), 1.0] for v in segments], dtype=np.float64)


def _mean_of(stats: np.ndarray) -> float:
    return _ratio_of_sums(stats.sum(axis=0).tolist())


def _ratio_of_sums(summed: list) -> float:
    """numerator / denominator, 0 where the denominator is 0 (no links at all)."""
    return summed[0] / summed[1] if summed[1] else 0.0


def resampled_scores(score: Callable[[list], float], stats: np.ndarray, idxs: np.ndarray) -> np.ndarray:
    """The score of every resample (a row of ``idxs`` picks the sentences of one): its per-sentence
    statistics summed in float64 and scored from plain Python floats, so that no step depends on
    numpy's type promotion. (sacreBLEU sums float32 statistics and scores numpy float32 scalars,
    which numpy 1 and numpy 2 round differently.)"""
    import numpy as np

    stats = np.asarray(stats, dtype=np.float64)
    return np.array([score(stats[i].sum(axis=0).tolist()) for i in idxs], dtype=np.float64)


def _resampled_means(stats: np.ndarray, idxs: np.ndarray) -> np.ndarray:
    """The resampled ratios of statistics ``(numerator, denominator)`` (a segment mean: (score, 1))."""
    return resampled_scores(_ratio_of_sums, stats, idxs)


def paired_mean_tests(segments: Sequence[Tuple[str, Sequence[float]]], bs_samples: int = 1000,
                      ar_trials: int = 10000) -> List[Dict]:
    """Paired bootstrap and approximate randomisation of a segment-mean metric, with
    sacreBLEU's draws and tests (its ``_paired_bs_test`` / ``_paired_ar_test`` on the
    statistics (score, 1) per segment); ``segments[0]`` is the baseline.

    Returns one dict per system, like a cell of :func:`sacrebleu_paired_tests`
    (``score`` is the mean segment score).
    """
    n = len(segments[0][1])
    for name, seg in segments:
        if len(seg) != n:
            raise ValueError(f"{name}: {len(seg)} segment scores but the baseline has {n}")
    return ratio_paired_tests([_mean_stats(seg) for _, seg in segments], bs_samples, ar_trials)


def ratio_paired_tests(stats: Sequence[np.ndarray], bs_samples: int = 1000, ar_trials: int = 10000) -> List[Dict]:
    """The paired tests of a score that is a ratio of sums of per-sentence statistics
    ``(numerator, denominator)`` (``stats[k]``: (n, 2) of system k, ``stats[0]`` the baseline):
    a segment mean is (score, 1), an alignment F1 (2 |A & G|, |A| + |G|) (:func:`paired_stat_tests`)."""
    import numpy as np

    return paired_stat_tests([np.asarray(s, dtype=np.float64) for s in stats], _ratio_of_sums, bs_samples, ar_trials)


def paired_stat_tests(stats: Sequence[np.ndarray], score: Callable[[list], float], bs_samples: int = 1000,
                      ar_trials: int = 10000, scores: Optional[Sequence[float]] = None) -> List[Dict]:
    """Paired bootstrap resampling and approximate randomisation of a score computed from summed
    per-sentence statistics (``stats[k]``: (sentences, statistics) of system k, float64; ``stats[0]``
    the baseline; ``score``: summed statistics as Python floats -> the score). sacreBLEU's draws for the
    seed and sentence count (:func:`bootstrap_indices`, :func:`ar_selectors`), its test statistics and
    p-values (``_paired_bs_test``, ``_paired_ar_test``, ``_bootstrap_resample`` for the baseline's
    interval); every sum in float64 and every score from Python floats (:func:`resampled_scores`), so the
    numbers are the same under every numpy version. ``scores``: each system's score (default: ``score``
    of its summed statistics). One dict per system: ``score``, ``bs_mean``, ``bs_ci`` and, but for the
    baseline, ``p_bootstrap``, ``p_ar`` and ``same_as_baseline`` (no difference: p = 1, module doc)."""
    import numpy as np

    base = stats[0]
    n = len(base)
    scores = [score(s.sum(axis=0).tolist()) for s in stats] if scores is None else list(scores)
    bs_idx = bootstrap_indices(n, bs_samples)
    base_mean, base_ci = estimate_ci(resampled_scores(score, base, bootstrap_indices(n, bs_samples, comparison=False)))
    pos = ar_selectors(n, ar_trials)
    neg = ~pos
    base_bs = resampled_scores(score, base, bs_idx)
    out = [{"score": scores[0], "bs_mean": base_mean, "bs_ci": base_ci}]
    for sys_, sys_score in zip(stats[1:], scores[1:]):
        diff = abs(scores[0] - sys_score)
        sys_bs = resampled_scores(score, sys_, bs_idx)
        sample_diffs = np.abs(sys_bs - base_bs)
        shuf_a = pos @ base + neg @ sys_  # pseudo-system A: the baseline's sentence where the coin says so
        shuf_b = neg @ base + pos @ sys_
        ar_diffs = np.abs(np.array([score(a) - score(b) for a, b in zip(shuf_a.tolist(), shuf_b.tolist())]))
        same = bool(np.array_equal(sys_, base))
        none = same or diff == 0  # no difference: p = 1 (module doc)
        mean, ci = estimate_ci(sys_bs)
        out.append({"score": sys_score, "bs_mean": mean, "bs_ci": ci,
                    "p_bootstrap": 1.0 if none else _p_value(sample_diffs - _mean(sample_diffs.tolist()), diff),
                    "p_ar": 1.0 if none else _p_value(ar_diffs, diff),
                    "same_as_baseline": same})
    return out


def significance_mark(p_values: Sequence) -> str:
    """'**' if every given p < 0.01, '*' if every p < 0.05, else ''."""
    ps = [p for p in p_values if p is not None]
    if not ps:
        return ""
    if max(ps) < 0.01:
        return "**"
    if max(ps) < 0.05:
        return "*"
    return ""


def is_better(key: str, score: float, baseline: float) -> bool:
    return score > baseline if higher_is_better(key) else score < baseline


def metric_mark(key: str, cell: Dict, baseline_score: float) -> str:
    """The mark of one compared system on one metric: '*' / '**' only if it is better than
    the baseline on that metric (higher, or lower for TER) with both paired tests at
    p < 0.05 / p < 0.01; '' for the baseline, an identical system and a worse one."""
    if cell.get("same_as_baseline", True) or not is_better(key, cell["score"], baseline_score):
        return ""
    return significance_mark([cell.get("p_bootstrap"), cell.get("p_ar")])


MARK_LEGEND = ("`*` / `**` after a score: better than the baseline on that metric with p < 0.05 / "
               "p < 0.01 in both paired bootstrap resampling ({bs} resamples) and paired approximate "
               "randomisation ({ar} trials), the same resamples for every metric (sacreBLEU's seed); "
               "an equal or worse system gets no mark.")
