"""``fairseq-attn-significance REF BASELINE_HYP SYSTEM_HYP... [--metrics bleu,chrf,ter] [--src SRC] [--json FILE]``

Paired significance tests of one or more systems against a baseline, on detokenised
text, for BLEU and chrF++ (TER with --metrics) through sacreBLEU's own PairedTest
(the numbers of ``sacrebleu REF -i BASE SYS -m bleu chrf --chrf-word-order 2
--paired-bs`` / ``--paired-ar``), and COMET with COMET_MODEL=/path/to/model.ckpt and
--src (the same resamples; nothing is downloaded).

The tests, their seeds and the marks: :mod:`fairseq_attn_plugins.reporting.significance`;
COMET: :mod:`fairseq_attn_plugins.reporting.comet`.
"""

import argparse
import sys

from ..reporting import comet as comet_metric
from ..reporting.files import check_output_paths, write_json_atomic
from ..reporting.metrics import METRICS_HELP, check_tokenize, parse_metrics, tokenizers
from ..reporting.significance import check_counts, format_table, legend_lines, paired_tests
from ..reporting.text_inputs import check_aligned, describe_empty, read_text_lines


def add_metric_args(p: argparse.ArgumentParser) -> None:
    """The metric flags shared by the reporting commands."""
    p.add_argument("--metrics", default="bleu,chrf", help=METRICS_HELP)
    p.add_argument("--tokenize", default="13a", help=f"sacreBLEU tokeniser for BLEU: {', '.join(tokenizers())} "
                   "(13a; zh for Chinese, ja-mecab for Japanese)")
    p.add_argument("--comet-batch-size", type=int, help="COMET batch size (default COMET_BATCH_SIZE or 16)")


def load_comet(args, prog: str, needs_src: bool = True):
    """The COMET scorer when COMET_MODEL is set (loaded before any other work), else None
    (:func:`print_comet_hint` then says how to enable it, once the results are out)."""
    path = comet_metric.model_path_from_env()
    if path is None:
        return None
    if needs_src and not getattr(args, "src", None):
        raise ValueError("COMET_MODEL is set: give the source sentences with --src FILE (COMET reads them)")
    return comet_metric.load(path, batch_size=args.comet_batch_size)


def print_comet_hint(prog: str, comet) -> None:
    if comet is None:
        print(f"{prog}: {comet_metric.ENABLE_HINT}", file=sys.stderr)


def main(argv=None) -> int:
    prog = "fairseq-attn-significance"
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ref", help="detokenised reference, one sentence per line")
    p.add_argument("baseline", help="baseline system output (detokenised)")
    p.add_argument("systems", nargs="+", help="system outputs to compare with the baseline")
    p.add_argument("--names", nargs="+", help="display names (baseline first); default: file names")
    p.add_argument("--src", help="source sentences (COMET reads them; needed with COMET_MODEL)")
    add_metric_args(p)
    p.add_argument("--bs-samples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--ar-trials", type=int, default=10000, help="approximate-randomisation trials (default 10000)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)

    paths = [args.baseline] + args.systems
    names = args.names or paths
    if len(names) != len(paths):
        p.error(f"--names: {len(names)} names for {len(paths)} systems")
    try:
        metrics = parse_metrics(args.metrics)
        check_tokenize(args.tokenize)
        check_counts(args.bs_samples, args.ar_trials)
        check_output_paths(args.json)
        comet = load_comet(args, prog)
        refs = read_text_lines(args.ref, "reference")
        sources = None
        if args.src:
            sources = read_text_lines(args.src, "source")
            check_aligned(args.ref, refs, args.src, sources)
        systems = []
        for n, path in zip(names, paths):
            hyps = read_text_lines(path, "system output")
            check_aligned(args.ref, refs, path, hyps)
            note = describe_empty(path, hyps)
            if note:
                print(f"{prog}: {note}", file=sys.stderr)
            systems.append((n, hyps))
        result = paired_tests(refs, systems, args.tokenize, args.bs_samples, args.ar_trials,
                              metrics=metrics, comet=comet, sources=sources)
    except (FileNotFoundError, ValueError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    print(format_table(result))
    print()
    print("\n".join(legend_lines(result)))
    if args.json:
        write_json_atomic(result, args.json)
    print_comet_hint(prog, comet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
