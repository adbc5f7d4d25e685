"""``fairseq-attn-significance REF BASELINE_HYP SYSTEM_HYP... [--json FILE]``

Paired significance tests of one or more systems against a baseline, on
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

Marks (:func:`system_mark`, shared by ``fairseq-attn-results`` and the demo):
``*`` / ``**`` only for a system that is BETTER than the baseline (higher
BLEU) with p < 0.05 / p < 0.01 in both tests; a system that equals the
baseline, or is worse, never gets a mark.
"""

import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

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


def check_output_paths(*paths: Optional[str]) -> None:
    """Each output file's folder must exist before any long work starts."""
    for path in paths:
        if path is None:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"{path}: folder {folder} does not exist (create it first)")


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


def write_json_atomic(obj, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="fairseq-attn-significance", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ref", help="detokenised reference, one sentence per line")
    p.add_argument("baseline", help="baseline system output (detokenised)")
    p.add_argument("systems", nargs="+", help="system outputs to compare with the baseline")
    p.add_argument("--names", nargs="+", help="display names (baseline first); default: file names")
    p.add_argument("--tokenize", default="13a", help="sacreBLEU tokeniser (13a; zh for Chinese, ja-mecab for Japanese)")
    p.add_argument("--bs-samples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--ar-trials", type=int, default=10000, help="approximate-randomisation trials (default 10000)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)

    paths = [args.baseline] + args.systems
    names = args.names or paths
    if len(names) != len(paths):
        p.error(f"--names: {len(names)} names for {len(paths)} systems")
    try:
        check_counts(args.bs_samples, args.ar_trials)
        check_output_paths(args.json)
        refs = read_lines(args.ref)
        systems = [(n, read_lines(path)) for n, path in zip(names, paths)]
        result = paired_tests(refs, systems, args.tokenize, args.bs_samples, args.ar_trials)
    except (FileNotFoundError, ValueError) as e:
        print(f"fairseq-attn-significance: error: {e}", file=sys.stderr)
        return 2
    print(format_table(result))
    print("\n* p < 0.05, ** p < 0.01 in both tests, for systems better than the baseline (first row); "
          "equal or worse systems get no mark")
    for test, sig in result["signature"].items():
        for metric, s in sig.items():
            print(f"{metric} signature ({test}): {s}")
    if args.json:
        write_json_atomic(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
