"""``fairseq-attn-significance REF BASELINE_HYP SYSTEM_HYP... [--metrics bleu,chrf,ter] [--src SRC] [--json FILE]
[--by-length EDGES|auto [--by-length-of src|ref|hyp] [--train-max-len N] [--plot FILE.png]]``

Paired significance tests of one or more systems against a baseline, on detokenised
text, for BLEU and chrF++ (TER with --metrics) through sacreBLEU's own PairedTest
(the numbers of ``sacrebleu REF -i BASE SYS -m bleu chrf --chrf-word-order 2
--paired-bs`` / ``--paired-ar``), and COMET with COMET_MODEL=/path/to/model.ckpt and
--src (the same resamples; nothing is downloaded).

The tests, their seeds and the marks: :mod:`fairseq_attn_reports.significance`;
COMET: :mod:`fairseq_attn_records.comet`; the metric flags: :mod:`.metric_options`; scores by
source, reference or output length (``--by-length``, ``--by-length-of``):
:mod:`fairseq_attn_reports.by_length`. Every table carries each system's output/reference
length ratio (sacreBLEU's sys_len / ref_len).
"""

import argparse
import sys

from fairseq_attn_records.command_line import Parser
from fairseq_attn_records.metrics import check_tokenize, parse_metrics
from fairseq_attn_records.text_inputs import check_aligned, describe_empty, read_text_lines

from fairseq_attn_records.output_files import check_output_paths, write_json
from ..significance import check_counts, format_table, legend_lines, paired_tests
from .length_options import add_length_args, check_length_args, draw_plot, length_markdown, score_buckets, segments_of
from .metric_options import add_metric_args, load_comet, print_comet_hint


def main(argv=None) -> int:
    prog = "fairseq-attn-significance"
    p = Parser(prog=prog, description=__doc__.split("\n\n")[1],
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ref", help="detokenised reference, one sentence per line")
    p.add_argument("baseline", help="baseline system output (detokenised)")
    p.add_argument("systems", nargs="+", help="system outputs to compare with the baseline")
    p.add_argument("--names", nargs="+", help="display names (baseline first); default: file names")
    p.add_argument("--src", help="source sentences (COMET reads them; needed with COMET_MODEL and --by-length)")
    add_metric_args(p)
    add_length_args(p)
    p.add_argument("--bs-samples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--ar-trials", type=int, help="approximate-randomisation trials (default 10000)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)

    paths = [args.baseline] + args.systems
    names = args.names or paths
    if len(names) != len(paths):
        p.error(f"--names: {len(names)} names for {len(paths)} systems")
    try:
        metrics = parse_metrics(args.metrics)
        check_tokenize(args.tokenize)
        edges, train_max_len = check_length_args(args)  # sets --ar-trials' default
        check_counts(args.bs_samples, args.ar_trials)
        check_output_paths(args.json, args.plot)
        comet = load_comet(args, prog)
        refs = read_text_lines(args.ref, "reference")
        sources = None
        if args.src:
            sources = read_text_lines(args.src, "source")
            check_aligned(args.ref, refs, args.src, sources, what="source sentence")
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
        if edges is not None:
            result["by_length"] = score_buckets(args, edges, train_max_len, refs, systems, sources, metrics,
                                                segments_of(result["systems"], result["metrics"]),
                                                {"comet": comet})
    except (FileNotFoundError, ValueError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    print(format_table(result))
    print()
    print("\n".join(legend_lines(result)))
    if "by_length" in result:
        print()
        print(length_markdown(result["by_length"]))
        draw_plot(result["by_length"], args.plot)
    if args.json:
        write_json(args.json, result)
    print_comet_hint(prog, comet, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
