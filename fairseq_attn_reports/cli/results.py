"""``fairseq-attn-results``: collect finished runs into a table that reads like a paper's:
system, the architecture and active pieces its run record says it trained, #params,
training speed, BLEU, chrF++ and COMET (with COMET_MODEL and --src),
each with its delta over the baseline and its significance mark (``*`` p < 0.05,
``**`` p < 0.01 in both paired bootstrap resampling and approximate randomisation,
the same resamples for every metric, for systems better than the baseline on that
metric only; see :func:`fairseq_attn_records.metrics.metric_mark`).

Usage: ``fairseq-attn-results --ref REF BASELINE_RUN RUN... [--names ...] [--src SRC]
[--metrics bleu,chrf,ter] [--json FILE] [--md FILE] [--tokenize 13a] [--curves FILE.png]
[--by-length EDGES|auto [--by-length-of src|ref|hyp] [--train-max-len N] [--plot FILE.png]] [--align]``.

``--align``: an AER column (lower is better) from each run's ``fairseq-attn-align`` output
(:mod:`fairseq_attn_reports.alignment_column`, docs/howto/alignment.md).

``--by-length`` (needs --src for source length; one run per system, several seeds are refused):
every metric scored and tested per bucket of source length (``--by-length-of ref``: reference
length; ``hyp``: each system's output length, without paired test), a second table after the main
one (:mod:`fairseq_attn_reports.by_length`). Each table has each system's output/reference
length ratio (sacreBLEU's sys_len / ref_len).

Several seeds (run directories ``<name>_seed<N>``, as ``SEEDS="1 2 3"`` writes them):
one row per system with every metric as mean ± sample std (n-1) and a mark only when
every seed pair against the baseline is significant on that metric.

What a run directory holds, which translations are scored, several seeds and the identity
checks (the same run twice, runs trained differently): :mod:`fairseq_attn_reports.results`.
"""

import argparse
import sys

from fairseq_attn_records.command_line import Parser
from fairseq_attn_records.metrics import check_tokenize, parse_metrics
from fairseq_attn_records.text_inputs import read_text_lines

from .. import seeds
from ..alignment_column import add_aer_column, aligned_runs
from ..curves import plot_curves
from fairseq_attn_records.output_files import check_output_paths, write_text
from ..results import collect, format_markdown
from ..significance import check_counts
from ..study_paths import write_table
from .length_options import add_length_args, check_length_args, draw_plot, length_markdown, score_buckets, segments_of
from .metric_options import add_metric_args, load_comet, print_comet_hint


def main(argv=None) -> int:
    p = Parser(prog="fairseq-attn-results", description=__doc__.split("\n\n")[0],
               formatter_class=argparse.RawDescriptionHelpFormatter, epilog=seeds.HELP)
    p.add_argument("--ref", help="detokenised reference of the test set (required unless only --curves)")
    p.add_argument("runs", nargs="+", help="run directories (train.log, and run.json or hyp.txt); the first is the baseline")
    p.add_argument("--names", nargs="+", help="system names (default: run directory names without a "
                   "'_seed<N>' suffix); runs with the same name are seeds of one system: BLEU is then "
                   "printed as mean ± sample std (n-1) over seeds, and marked significant only if it is so "
                   "against the baseline for every pair of seeds (see fairseq_attn_reports/seeds.py)")
    p.add_argument("--curves", metavar="FILE.png", help="draw training/validation loss (and validation BLEU "
                   "if logged) against updates and wall-clock time from the runs' train.log; seeds as "
                   "mean ± std bands")
    p.add_argument("--src", help="source side of the test set (COMET reads it; needed with COMET_MODEL and "
                   "--by-length)")
    add_metric_args(p)
    add_length_args(p)
    p.add_argument("--bs-samples", type=int, default=1000)
    p.add_argument("--ar-trials", type=int, help="approximate-randomisation trials (default 10000)")
    p.add_argument("--align", action="store_true", help="add an AER column: each run's cross-attention "
                   "alignment (RUN/align/aer.json of fairseq-attn-align, the layer and method chosen on "
                   "valid) against the gold, with the same paired tests (lower is better)")
    p.add_argument("--json", metavar="FILE", help="write the table as JSON")
    p.add_argument("--md", metavar="FILE", help="write the table as markdown")
    args = p.parse_args(argv)
    names = args.names or seeds.default_names(args.runs)
    if len(names) != len(args.runs):
        p.error(f"--names: {len(names)} names for {len(args.runs)} runs")
    if not args.ref and not args.curves:
        p.error("--ref is required (unless only --curves is asked for)")
    try:
        metrics = parse_metrics(args.metrics)
        check_tokenize(args.tokenize)
        edges, train_max_len = check_length_args(args)  # sets --ar-trials' default
        check_counts(args.bs_samples, args.ar_trials)
        if edges is not None and not args.ref:
            raise ValueError("--by-length needs --ref (it scores the test set by source length)")
        check_output_paths(args.json, args.md, args.plot)
        groups = seeds.group_runs(names, args.runs)
        if args.align and len(groups) < len(args.runs):
            raise ValueError("--align needs one run per system (several seeds given)")
        if edges is not None and len(groups) < len(args.runs):
            raise ValueError("--by-length needs one run per system (several seeds given: "
                             + ", ".join(f"{n} x{len(rs)}" for n, rs in groups.items() if len(rs) > 1) + ")")
        aligned = None
        if args.align and args.ref:  # the runs' alignments checked before the table is scored
            read_text_lines(args.ref, "reference")  # (a missing reference named as the table names it)
            aligned = aligned_runs(names, args.runs, args.ref)
        comet = load_comet(args, "fairseq-attn-results") if args.ref else None
        if args.curves:
            plot_curves([(n, [d for _, d in rs]) for n, rs in groups.items()], args.curves)
            print(f"learning curves: {args.curves}")
        if not args.ref:
            return 0
        if len(groups) < len(args.runs):  # several seeds of a system
            table = seeds.collect_seeds(groups, args.ref, args.tokenize, args.bs_samples, args.ar_trials,
                                        metrics=metrics, comet=comet, src_path=args.src)
            md = seeds.format_markdown(table)
        else:
            table = collect(list(zip(names, args.runs)), args.ref, args.tokenize, args.bs_samples, args.ar_trials,
                            metrics=metrics, comet=comet, src_path=args.src)
            if args.align:
                table["notes"] = list(table.get("notes") or []) + add_aer_column(table, aligned, args.ref)
            md = format_markdown(table)
            if edges is not None:
                table["by_length"] = buckets_of_runs(args, edges, train_max_len, table, metrics, comet)
                md += "\n\n" + length_markdown(table["by_length"])
    except (FileNotFoundError, ValueError) as e:
        print(f"fairseq-attn-results: error: {e}", file=sys.stderr)
        return 1
    print(md)
    if "by_length" in table:
        draw_plot(table["by_length"], args.plot)
    if args.md:
        write_text(args.md, md + "\n")
    if args.json:
        write_table(args.json, table)  # its paths relative to its folder
    print_comet_hint("fairseq-attn-results", comet, args)
    return 0


def buckets_of_runs(args, edges, train_max_len, table, metrics, comet):
    """The ``by_length`` object of a single-seed table: the translations its rows scored."""
    refs = read_text_lines(args.ref, "reference")
    sources = read_text_lines(args.src, "source") if args.src else None
    systems = [(r["system"], read_text_lines(r["hyp"], "system output")) for r in table["rows"]]
    return score_buckets(args, edges, train_max_len, refs, systems, sources, metrics,
                         segments_of(table["rows"], table["metrics"]), {"comet": comet})


if __name__ == "__main__":
    sys.exit(main())
