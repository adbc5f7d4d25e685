"""``fairseq-attn-significance REF BASELINE_HYP SYSTEM_HYP... [--json FILE]``

Paired significance tests of one or more systems against a baseline, on
detokenised text, with sacreBLEU's own implementation
(:class:`sacrebleu.significance.PairedTest`, the code behind
``sacrebleu --paired-bs`` / ``--paired-ar``):

* paired bootstrap resampling (Koehn, 2004), 1000 resamples by default;
* paired approximate randomisation (Riezler and Maxwell, 2005), 10000 trials.

Both use sacreBLEU's seed (``SACREBLEU_SEED``, default 12345), so the numbers
equal those printed by ``sacrebleu REF -i BASE SYS --paired-bs`` on the same files.
"""

import argparse
import json
import os
import sys
from typing import Dict, List, Sequence, Tuple

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest


def read_lines(path: str) -> List[str]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file (give detokenised text, one sentence per line)")
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def paired_tests(refs: Sequence[str], systems: Sequence[Tuple[str, Sequence[str]]],
                 tokenize: str = "13a", bs_samples: int = 1000, ar_trials: int = 10000) -> Dict:
    """Run paired bootstrap and approximate randomisation; ``systems[0]`` is the baseline.

    Returns ``{"signature": {...}, "systems": [{"name", "bleu", "bs_mean", "bs_ci",
    "p_bootstrap", "p_ar"}, ...]}``; the baseline has no p-values.
    """
    if len(systems) < 2:
        raise ValueError("need a baseline and at least one system to compare")
    for name, hyps in systems:
        if len(hyps) != len(refs):
            raise ValueError(f"{name}: {len(hyps)} lines but the reference has {len(refs)}")
    out = {"systems": [{"name": name} for name, _ in systems], "signature": {}}
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


def format_table(result: Dict) -> str:
    lines = ["| system | BLEU | bootstrap mean ± 95% CI | p (bootstrap) | p (approx. rand.) |",
             "|---|---:|---:|---:|---:|"]
    for row in result["systems"]:
        p_bs, p_ar = row.get("p_bootstrap"), row.get("p_ar")
        fmt = lambda p: "-" if p is None else f"{p:.4f}"
        lines.append(f"| {row['name']}{significance_mark([p_bs, p_ar])} | {row['bleu']:.2f} | "
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
        refs = read_lines(args.ref)
        systems = [(n, read_lines(path)) for n, path in zip(names, paths)]
        result = paired_tests(refs, systems, args.tokenize, args.bs_samples, args.ar_trials)
    except (FileNotFoundError, ValueError) as e:
        print(f"fairseq-attn-significance: error: {e}", file=sys.stderr)
        return 2
    print(format_table(result))
    print("\n* p < 0.05, ** p < 0.01 in both tests (baseline: first row)")
    for test, sig in result["signature"].items():
        for metric, s in sig.items():
            print(f"{metric} signature ({test}): {s}")
    if args.json:
        write_json_atomic(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
