"""Paired significance tests of one or more systems against a baseline, on
detokenised text, for every metric a paper reports: BLEU and chrF++ (TER on request)
through sacreBLEU's own :class:`sacrebleu.significance.PairedTest` (the code behind
``sacrebleu --paired-bs`` / ``--paired-ar``), and COMET when a checkpoint is given
(:mod:`fairseq_attn_records.comet`), with the same resamples (the metric registry,
:mod:`fairseq_attn_records.metrics`):

* paired bootstrap resampling (Koehn, 2004), 1000 resamples by default;
* paired approximate randomisation (Riezler and Maxwell, 2005), 10000 trials.

Both use sacreBLEU's seed (``SACREBLEU_SEED``, default 12345), so the numbers
equal those printed by ``sacrebleu REF -i BASE SYS -m bleu chrf --chrf-word-order 2
--paired-bs`` (or ``--paired-ar``) on the same files, with one exception: a system
whose per-sentence statistics on a metric equal the baseline's gets p = 1.0 on it
(sacreBLEU counts the resamples with zero difference as wins and prints the smallest
possible p, 1/(n+1), for identical systems).

The command line is ``fairseq-attn-significance`` (:mod:`fairseq_attn_reports.cli.significance`).

Marks (:func:`system_mark` for BLEU, :func:`fairseq_attn_records.metrics.metric_mark` for any metric; shared
by ``fairseq-attn-results``, the demo and Table 1): ``*`` / ``**`` only for a system
that is BETTER than the baseline on that metric with p < 0.05 / p < 0.01 in both
tests; a system that equals the baseline, or is worse, never gets a mark.
"""

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from fairseq_attn_records import metrics as M


def check_counts(bs_samples: int, ar_trials: int) -> None:
    """Resample / trial counts must be positive; raises ValueError naming the flag."""
    for flag, n in (("--bs-samples", bs_samples), ("--ar-trials", ar_trials)):
        if not isinstance(n, int) or n <= 0:
            raise ValueError(f"{flag} must be a positive integer (got {n!r})")


def paired_tests(refs: Sequence[str], systems: Sequence[Tuple[str, Sequence[str]]],
                 tokenize: str = "13a", bs_samples: int = 1000, ar_trials: int = 10000,
                 metrics: Sequence[str] = M.DEFAULT_METRICS, comet=None,
                 sources: Optional[Sequence[str]] = None, scorers: Optional[Mapping] = None,
                 stats: Optional[M.SentenceStats] = None) -> Dict:
    """Run paired bootstrap and approximate randomisation on every metric; ``systems[0]``
    is the baseline. ``metrics``: corpus metrics of the registry (:mod:`fairseq_attn_records.metrics`);
    ``scorers``: ``{key: scorer}`` of segment metrics of the registry (a scorer has
    ``score_systems(sources, refs, systems)`` and ``signature(bs_samples=, ar_trials=, seed=)``);
    ``comet``: a loaded :class:`fairseq_attn_records.comet.CometScorer`, the scorer of ``comet``.
    A metric that reads the source (COMET) needs ``sources``. ``stats``: sacreBLEU's per-sentence
    statistics on ``refs`` (:class:`fairseq_attn_records.metrics.SentenceStats`); a table that runs
    several tests on one reference set passes one, so each system's statistics are extracted once.

    Returns ``{"metrics": [keys], "labels": {key: label}, "signature": {"bs"|"ar": {label:
    signature}}, "systems": [{"name", "scores": {key: {"score", "bs_mean", "bs_ci",
    "p_bootstrap", "p_ar", "same_as_baseline"}}, "<key>_segments" per segment metric,
    "length_ratio" / "sys_len" / "ref_len" (:func:`fairseq_attn_records.metrics.length_ratio`), and BLEU's
    cell flattened: "bleu", "bs_mean", "bs_ci", "p_bootstrap", "p_ar", "same_as_baseline"}]}``;
    the baseline has no p-values. Every number is a plain float (JSON-safe).
    """
    if len(systems) < 2:
        raise ValueError("need a baseline and at least one system to compare")
    if not refs:
        raise ValueError("the reference is empty")
    check_counts(bs_samples, ar_trials)
    M.check_tokenize(tokenize)
    metrics = list(metrics)
    if "bleu" not in metrics:
        metrics = ["bleu"] + metrics  # the marks of every table start from BLEU
    scorers = dict(scorers or {})
    if comet is not None:
        scorers["comet"] = comet
    for key in scorers:
        metric = M.get(key)
        if metric.level != "segment":
            raise ValueError(f"metric {key}: a scorer is given for a corpus metric (list it in --metrics)")
        if metric.needs_source and (sources is None or len(sources) != len(refs)):
            raise ValueError(f"{metric.label} needs the source sentences (one per reference line): "
                             f"give the source file")
    stats = M.SentenceStats(refs, tokenize) if stats is None else stats
    res = M.sacrebleu_paired_tests(refs, systems, metrics, tokenize, bs_samples, ar_trials, stats=stats)
    labels = {k: M.label(k) for k in metrics}
    signature = {"bs": {}, "ar": {}}
    for key in metrics:
        for test in ("bs", "ar"):
            signature[test][labels[key]] = res["signature"][key][test]
    out_rows = res["systems"]
    seed = M.sacrebleu_seed()[1]
    for key, scorer in scorers.items():
        segs = scorer.score_systems(sources, refs, [hyps for _, hyps in systems])
        cells = M.paired_mean_tests([(name, seg) for (name, _), seg in zip(systems, segs)], bs_samples, ar_trials)
        for row, cell, seg in zip(out_rows, cells, segs):
            row["scores"][key] = cell
            row[f"{key}_segments"] = seg
        metrics.append(key)
        labels[key] = M.label(key)
        signature["bs"][labels[key]] = scorer.signature(bs_samples=bs_samples, seed=seed)
        signature["ar"][labels[key]] = scorer.signature(ar_trials=ar_trials, seed=seed)
    for row, (_, hyps) in zip(out_rows, systems):  # the output/reference length ratio (sacreBLEU's)
        lr = stats.length_ratio(hyps)
        row.update(length_ratio=lr["ratio"], sys_len=lr["sys_len"], ref_len=lr["ref_len"])
    for row in out_rows:  # BLEU's cell flattened, as every table reads it
        b = row["scores"]["bleu"]
        row.update(bleu=b["score"], bs_mean=b.get("bs_mean"), bs_ci=b.get("bs_ci"),
                   p_bootstrap=b.get("p_bootstrap"), p_ar=b.get("p_ar"))
        if "same_as_baseline" in b:
            row["same_as_baseline"] = b["same_as_baseline"]
    return {"metrics": metrics, "labels": labels, "signature": signature, "systems": out_rows,
            "bs_samples": bs_samples, "ar_trials": ar_trials, "tokenize": tokenize}


significance_mark = M.significance_mark


def system_mark(system: Dict, baseline_bleu: float) -> str:
    """The mark of one compared system (a row of :func:`paired_tests`): '*' / '**' only
    if it is better than the baseline (BLEU strictly higher, per-sentence statistics not
    identical) with both p-values < 0.05 / < 0.01; '' for the baseline, for an equal
    system and for a worse one, whatever its p-values."""
    if system.get("same_as_baseline", True) or not system["bleu"] > baseline_bleu:
        return ""
    return significance_mark([system.get("p_bootstrap"), system.get("p_ar")])


def format_table(result: Dict) -> str:
    """One row per system; per metric its score (bootstrap mean ± 95% CI) with its mark,
    and the two p-values; the legend and signatures are :func:`legend_lines`."""
    keys = result.get("metrics", ["bleu"])
    labels = result.get("labels", {"bleu": "BLEU"})
    head = "| system |" + "".join(f" {labels[k]} (mean ± 95% CI) | p {labels[k]} (bs / ar) |" for k in keys)
    head += " Len. ratio |"
    lines = [head, "|---|" + "---:|---:|" * len(keys) + "---:|"]
    base = result["systems"][0]["scores"]
    fmt = lambda p: "-" if p is None else f"{p:.4f}"
    for row in result["systems"]:
        cells = ""
        for k in keys:
            c = row["scores"][k]
            nd = M.digits(k)
            ci = "" if c.get("bs_mean") is None else f" ({c['bs_mean']:.{nd}f} ± {c['bs_ci']:.{nd}f})"
            mark = M.metric_mark(k, c, base[k]["score"]) if row is not result["systems"][0] else ""
            p = "-" if c.get("p_bootstrap") is None else f"{fmt(c.get('p_bootstrap'))} / {fmt(c.get('p_ar'))}"
            cells += f" {c['score']:.{nd}f}{mark}{ci} | {p} |"
        lines.append(f"| {row['name']} |" + cells + f" {fmt_ratio(row.get('length_ratio'))} |")
    return "\n".join(lines)


def fmt_ratio(r: Optional[float]) -> str:
    return "-" if r is None else f"{r:.3f}"


LENGTH_RATIO_LEGEND = ("Len. ratio: output / reference length in tokens (sacreBLEU's sys_len / ref_len, its BLEU "
                       "tokeniser); below 1 the outputs are shorter than the references.")


def legend_lines(result: Dict) -> List[str]:
    """Which test and threshold made each mark, the baseline, and every signature."""
    out = [f"Baseline: {result['systems'][0]['name']} (first row). " +
           M.MARK_LEGEND.format(bs=result.get("bs_samples", 1000), ar=result.get("ar_trials", 10000))]
    out.append(LENGTH_RATIO_LEGEND)
    for key in result.get("metrics", []):
        if not M.higher_is_better(key):
            out.append(f"{M.label(key)}: lower is better (its mark asks for a lower {M.label(key)}).")
    for test, sigs in result["signature"].items():
        for metric, sig in sigs.items():
            out.append(f"{metric} signature ({test}): {sig}")
    return out
