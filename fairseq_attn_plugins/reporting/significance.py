"""Paired significance tests of one or more systems against a baseline, on
detokenised text, with sacreBLEU's own implementation
(:class:`sacrebleu.significance.PairedTest`, the code behind
``sacrebleu --paired-bs`` / ``--paired-ar``):

* paired bootstrap resampling (Koehn, 2004), 1000 resamples by default;
* paired approximate randomisation (Riezler and Maxwell, 2005), 10000 trials.

Both use sacreBLEU's seed (``SACREBLEU_SEED``, default 12345), so the numbers
equal those printed by ``sacrebleu REF -i BASE SYS --paired-bs`` on the same files,
with one exception: a system whose per-sentence BLEU statistics equal the
baseline's gets p = 1.0 (sacreBLEU counts the resamples with zero difference as
wins and prints the smallest possible p, 1/(n+1), for identical systems).

The command line is ``fairseq-attn-significance`` (:mod:`fairseq_attn_plugins.cli.significance`).

Marks (:func:`system_mark`, shared by ``fairseq-attn-results`` and the demo):
``*`` / ``**`` only for a system that is BETTER than the baseline (higher
BLEU) with p < 0.05 / p < 0.01 in both tests; a system that equals the
baseline, or is worse, never gets a mark.
"""

import os
from typing import Dict, List, Sequence, Tuple

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest


def read_lines(path: str) -> List[str]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file (give detokenised text, one sentence per line)")
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    if not lines:
        raise ValueError(f"{path}: empty file (give detokenised text, one sentence per line)")
    return lines


def check_counts(bs_samples: int, ar_trials: int) -> None:
    """Resample / trial counts must be positive; raises ValueError naming the flag."""
    for flag, n in (("--bs-samples", bs_samples), ("--ar-trials", ar_trials)):
        if not isinstance(n, int) or n <= 0:
            raise ValueError(f"{flag} must be a positive integer (got {n!r})")


def paired_tests(refs: Sequence[str], systems: Sequence[Tuple[str, Sequence[str]]],
                 tokenize: str = "13a", bs_samples: int = 1000, ar_trials: int = 10000) -> Dict:
    """Run paired bootstrap and approximate randomisation; ``systems[0]`` is the baseline.

    Returns ``{"signature": {...}, "systems": [{"name", "bleu", "bs_mean", "bs_ci",
    "p_bootstrap", "p_ar", "same_as_baseline"}, ...]}``; the baseline has no p-values.
    A system whose per-sentence statistics equal the baseline's has
    ``same_as_baseline`` True and both p-values 1.0 (see the module docstring).
    """
    if len(systems) < 2:
        raise ValueError("need a baseline and at least one system to compare")
    if not refs:
        raise ValueError("the reference is empty")
    check_counts(bs_samples, ar_trials)
    for name, hyps in systems:
        if len(hyps) != len(refs):
            raise ValueError(f"{name}: {len(hyps)} lines but the reference has {len(refs)}")
    out = {"systems": [{"name": name} for name, _ in systems], "signature": {}}
    per_sentence = [BLEU(tokenize=tokenize)._extract_corpus_statistics(list(hyps), [list(refs)])
                    for _, hyps in systems]
    for row, stats in zip(out["systems"][1:], per_sentence[1:]):
        row["same_as_baseline"] = stats == per_sentence[0]
    for test, n in (("bs", bs_samples), ("ar", ar_trials)):
        metric = BLEU(tokenize=tokenize)
        ps = PairedTest(list(systems), {"BLEU": metric}, references=[list(refs)],
                        test_type=test, n_samples=n, n_jobs=1)
        sigs, scores = ps()
        out["signature"][test] = {k: v.format() for k, v in sigs.items()}
        results = scores["BLEU"]
        for row, res in zip(out["systems"], results):
            row["bleu"] = res.score
            if test == "bs":
                row["bs_mean"], row["bs_ci"] = res.mean, res.ci
                row["p_bootstrap"] = res.p_value
            else:
                row["p_ar"] = res.p_value
    for row in out["systems"][1:]:
        if row["same_as_baseline"]:  # no difference at all: nothing is significant
            row["p_bootstrap"] = row["p_ar"] = 1.0
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


def system_mark(system: Dict, baseline_bleu: float) -> str:
    """The mark of one compared system (a row of :func:`paired_tests`): '*' / '**' only
    if it is better than the baseline (BLEU strictly higher, per-sentence statistics not
    identical) with both p-values < 0.05 / < 0.01; '' for the baseline, for an equal
    system and for a worse one, whatever its p-values."""
    if system.get("same_as_baseline", True) or not system["bleu"] > baseline_bleu:
        return ""
    return significance_mark([system.get("p_bootstrap"), system.get("p_ar")])


def format_table(result: Dict) -> str:
    lines = ["| system | BLEU | bootstrap mean ± 95% CI | p (bootstrap) | p (approx. rand.) |",
             "|---|---:|---:|---:|---:|"]
    base_bleu = result["systems"][0]["bleu"]
    for row in result["systems"]:
        p_bs, p_ar = row.get("p_bootstrap"), row.get("p_ar")
        fmt = lambda p: "-" if p is None else f"{p:.4f}"
        lines.append(f"| {row['name']}{system_mark(row, base_bleu)} | {row['bleu']:.2f} | "
                     f"{row['bs_mean']:.2f} ± {row['bs_ci']:.2f} | {fmt(p_bs)} | {fmt(p_ar)} |")
    return "\n".join(lines)
