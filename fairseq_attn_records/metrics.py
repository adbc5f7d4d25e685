"""The metrics an MT paper reports today, each with its paired significance tests.

The registry :data:`METRICS` holds one :class:`Metric` row per metric (key, label, direction,
digits, corpus or segment, how to score); significance, results, seeds, Table 1 and the recipes'
scoring step read it and nothing else. A new metric is one :func:`register` call (plus, for a
segment metric, a scorer given to :func:`fairseq_attn_reports.significance.paired_tests`
as ``scorers={key: scorer}``). :func:`corpus_scores` is the one score shape of ``scores.json`` and
of the run record's evaluations.

* **BLEU** (sacreBLEU, detokenised, ``--tokenize``), **chrF++** (sacreBLEU's chrF with
  word n-grams of order 2: ``-m chrf --chrf-word-order 2``) and, with ``--metrics``,
  **TER** (lower is better) are computed and tested through sacreBLEU's own
  :class:`sacrebleu.significance.PairedTest`, all metrics in one call: the numbers equal
  ``sacrebleu REF -i BASE SYS... -m bleu chrf --chrf-word-order 2 --paired-bs`` /
  ``--paired-ar`` on the same files.
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
* every number is a plain float: sacreBLEU computes chrF's resampled scores in float32,
  and its own ``-f json`` writer crashes on them in paired mode.
"""

import logging
import os
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from sacrebleu.metrics import BLEU, CHRF, TER


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


register(Metric("bleu", "BLEU", make=lambda tokenize: BLEU(tokenize=tokenize)))
register(Metric("chrf", "chrF++", make=lambda tokenize: CHRF(word_order=2), help="chrF++: word order 2"))
register(Metric("ter", "TER", higher_is_better=False, make=lambda tokenize: TER()))
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
    return sorted(BLEU.TOKENIZERS)


def check_tokenize(tokenize: str) -> None:
    """``--tokenize`` must be one of sacreBLEU's tokenisers (one line, not a KeyError)."""
    if tokenize not in BLEU.TOKENIZERS:
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

    def for_paired_test(self, key: str) -> "_StatsFromCache":
        """A metric object for :class:`sacrebleu.significance.PairedTest` that reads the statistics here."""
        return _StatsFromCache(self, key)

    def length_ratio(self, hyps: Sequence[str]) -> Dict:
        """:func:`length_ratio` from the BLEU statistics held here."""
        return _ratio_of(self.metric("bleu")._aggregate_and_compute(self.stats("bleu", hyps)))


class _StatsFromCache:
    """sacreBLEU's metric object, its statistics served by a :class:`SentenceStats` (PairedTest calls
    ``_extract_corpus_statistics`` for the baseline and for every system; the rest is the metric's own)."""

    def __init__(self, cache: SentenceStats, key: str):
        self._cache, self._key, self._metric = cache, key, cache.metric(key)

    def __getattr__(self, name):
        return getattr(self._metric, name)

    def _extract_corpus_statistics(self, hypotheses, references):
        return self._cache.stats(self._key, hypotheses)


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

    Returns ``{"metrics": [keys], "signature": {key: {"bs": str, "ar": str}},
    "systems": [{"name", "scores": {key: {"score", "bs_mean", "bs_ci", "p_bootstrap",
    "p_ar", "same_as_baseline"}}}]}``; the baseline has no p-values.
    """
    from sacrebleu.significance import PairedTest

    logging.getLogger("sacrebleu").setLevel(logging.WARNING)  # its per-step INFO lines

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
    for key in metrics:  # identical per-sentence statistics: no difference to test
        per_system = [stats.stats(key, hyps) for _, hyps in named]
        for row, st in zip(out["systems"][1:], per_system[1:]):
            row["scores"][key]["same_as_baseline"] = st == per_system[0]
    for test, n in (("bs", bs_samples), ("ar", ar_trials)):
        ps = PairedTest(named, {key: stats.for_paired_test(key) for key in metrics}, references=None,
                        test_type=test, n_samples=n, n_jobs=1)
        sigs, scores = ps()
        # PairedTest keys its results by the score's own name (BLEU, chrF2++, TER), in our order
        by_name = [k for k in scores if k != "System"]
        for key, name in zip(metrics, by_name):
            out["signature"][key][test] = sigs[name].format()
            for row, res in zip(out["systems"], scores[name]):
                cell = row["scores"][key]
                cell["score"] = float(res.score)
                if test == "bs":
                    cell["bs_mean"], cell["bs_ci"] = _float(res.mean), _float(res.ci)
                    cell["p_bootstrap"] = _float(res.p_value)
                else:
                    cell["p_ar"] = _float(res.p_value)
    base = out["systems"][0]["scores"]
    for row in out["systems"][1:]:
        for key, cell in row["scores"].items():
            if cell["same_as_baseline"] or cell["score"] == base[key]["score"]:  # no difference (module doc)
                cell["p_bootstrap"] = cell["p_ar"] = 1.0
    return out


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
    seed, _ = sacrebleu_seed()
    rng = np.random.default_rng((seed if seed else None) if comparison else seed)
    return rng.choice(n_items, size=(n_samples, n_items), replace=True)


def ar_selectors(n_items: int, n_trials: int) -> np.ndarray:
    """The (n_trials, n_items) coin flips of sacreBLEU's ``_paired_ar_test`` (True: the
    pseudo-system A takes the baseline's sentence)."""
    seed, _ = sacrebleu_seed()
    rng = np.random.default_rng(seed if seed else None)
    return rng.integers(2, size=(n_trials, n_items), dtype=bool)


def estimate_ci(scores: np.ndarray) -> Tuple[float, float]:
    """sacreBLEU's bootstrap mean and 95% half-width (its ``estimate_ci``)."""
    s = np.sort(scores)
    lower = len(s) // 40
    return float(s.mean()), float(0.5 * (s[len(s) - lower - 1] - s[lower]))


def _p_value(stats: np.ndarray, real_difference: float) -> float:
    """sacreBLEU's ``_compute_p_value``: (count of stats > difference + 1) / (n + 1)."""
    return (int(np.sum(stats > real_difference)) + 1) / (len(stats) + 1)


def _mean_stats(segments: Sequence[float]) -> np.ndarray:
    """A segment-mean metric as sacreBLEU's sufficient statistics: (score, 1) per segment."""
    return np.array([[float(v), 1.0] for v in segments], dtype=np.float64)


def _mean_of(stats: np.ndarray) -> float:
    total = stats.sum(axis=0)
    return float(total[0]) / float(total[1]) if total[1] else 0.0


def _resampled_means(stats: np.ndarray, idxs: np.ndarray) -> np.ndarray:
    """sacreBLEU's bootstrap arithmetic: float32 statistics, one sum per resample."""
    stats32 = stats.astype("float32")
    return np.array([float(s[0]) / float(s[1]) if s[1] else 0.0 for s in (stats32[i].sum(0) for i in idxs)])


def paired_mean_tests(segments: Sequence[Tuple[str, Sequence[float]]], bs_samples: int = 1000,
                      ar_trials: int = 10000) -> List[Dict]:
    """Paired bootstrap and approximate randomisation of a segment-mean metric, with
    sacreBLEU's draws and arithmetic (its ``_paired_bs_test`` / ``_paired_ar_test`` on the
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
    a segment mean is (score, 1), an alignment F1 (2 |A & G|, |A| + |G|). sacreBLEU's draws for
    the seed and sentence count, its arithmetic; one dict per system (``score`` the ratio)."""
    base = np.asarray(stats[0], dtype=np.float64)
    n = len(base)
    bs_idx = bootstrap_indices(n, bs_samples)
    base_ci = estimate_ci(_resampled_means(base, bootstrap_indices(n, bs_samples, comparison=False)))
    pos = ar_selectors(n, ar_trials)
    neg = ~pos
    base_bs = _resampled_means(base, bs_idx)
    base_score = _mean_of(base)
    out = [{"score": base_score, "bs_mean": base_ci[0], "bs_ci": base_ci[1]}]
    for sys_ in stats[1:]:
        sys_ = np.asarray(sys_, dtype=np.float64)
        score = _mean_of(sys_)
        diff = abs(base_score - score)
        sys_bs = _resampled_means(sys_, bs_idx)
        sample_diffs = np.abs(sys_bs - base_bs)
        shuf_a = pos @ base + neg @ sys_  # pseudo-system A: the baseline's segment where the coin says so
        shuf_b = neg @ base + pos @ sys_
        ar_diffs = np.abs(_ratio(shuf_a) - _ratio(shuf_b))
        same = bool(np.array_equal(sys_, base))
        none = same or diff == 0  # no difference: p = 1 (module doc)
        mean, ci = estimate_ci(sys_bs)
        out.append({"score": score, "bs_mean": mean, "bs_ci": ci,
                    "p_bootstrap": 1.0 if none else _p_value(sample_diffs - sample_diffs.mean(), diff),
                    "p_ar": 1.0 if none else _p_value(ar_diffs, diff),
                    "same_as_baseline": same})
    return out


def _ratio(sums: np.ndarray) -> np.ndarray:
    """numerator / denominator per row, 0 where the denominator is 0 (no links at all)."""
    den = sums[:, 1]
    return np.divide(sums[:, 0], den, out=np.zeros_like(den), where=den != 0)


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
