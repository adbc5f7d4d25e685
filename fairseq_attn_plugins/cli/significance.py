"""``fairseq-attn-significance REF BASELINE_HYP SYSTEM_HYP... [--json FILE]``

Paired significance tests of one or more systems against a baseline, on
detokenised text, with sacreBLEU's own implementation
(:class:`sacrebleu.significance.PairedTest`, the code behind
``sacrebleu --paired-bs`` / ``--paired-ar``):

The tests, their seeds and the marks: :mod:`fairseq_attn_plugins.reporting.significance`.
"""

import argparse
import sys

from ..reporting.files import check_output_paths, write_json_atomic
from ..reporting.significance import check_counts, format_table, paired_tests, read_lines


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
