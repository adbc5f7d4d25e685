"""``fairseq-attn-paper``: the CSAN paper's Table 1 and Figures 2-3 from finished runs.

Sub-commands (the recipes' ``table1.sh`` / ``figure2.sh`` / ``figure3.sh`` train
and evaluate the runs, then call these):

* ``rows [--rows all|KEY,...]`` -- the Table 1 rows as ``KEY ARCH`` lines, in the
  paper's order; fails naming any row whose architecture is not registered;
* ``table1 --ref REF --runs-dir DIR [--rows ...]`` -- renders Table 1 from
  ``DIR/<key>`` (train.log, and the translations of REF its run record names: ``test/hyp.txt``)
  (markdown on stdout, ``--md``, ``--json``);
* ``figure2 --ref VALID_REF --window W=RUN_DIR... --heads N=RUN_DIR... --png F`` (a value given
  again: another seed of that point; mean ± std over seeds);
* ``figure3 --ref REF --baseline NAME=RUN_DIR|HYP --system NAME=RUN_DIR|HYP... --png F``;
* ``plot-table1 TABLE1.json --png F`` -- a finished Table 1 drawn: each row's BLEU per seed, its mean and
  its mark;
* ``claims --table1 TABLE1.json --figure2 FIGURE2.json... [--speed BENCH.json] [--md F --json F]`` -- a
  verdict per claim of the paper from the studies' outputs (:mod:`fairseq_attn_reports.claims`: the
  rule, paired tests over every seed pair; the efficiency claim's speed from the rows measured side by
  side by ``fairseq-attn-bench --json`` when ``--speed`` gives it); a committed study (``study-export``)
  is read from its own bundle.

Every run folder is checked against its run record (``run.json``; for runs trained without
one, the configuration of their ``checkpoint_last.pt``): a Table 1 row, a ``--window W`` /
``--heads N`` label or a Figure 3 name that is a Table 1 row key whose run was trained as
something else is an error naming both, and the same run given twice is an error. The
translations are those of the subset evaluated on ``--ref``.
"""

import argparse
import os
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_attn_records.command_line import Parser
from fairseq_attn_records.metrics import parse_metrics
from fairseq_attn_records.text_inputs import read_text_lines

from .. import claims, figures, side_by_side
from .. import table1
from fairseq_attn_records.output_files import check_output_paths, write_json, write_text
from ..runs import MODEL_HEADER, Run, check_distinct, model_cell, model_legend
from ..study_bundle import is_committed, table_tokenize, with_outputs
from ..study_paths import load_table, write_table
from ..table1 import BASELINE
from .metric_options import add_metric_args, load_comet, print_comet_hint


def _pairs(items: List[str], flag: str, numeric: bool) -> List[Tuple]:
    out = []
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"{flag} {item!r}: expected NAME=PATH")
        if numeric:
            try:
                name = int(name)
            except ValueError:
                raise ValueError(f"{flag} {item!r}: {name!r} is not an integer") from None
        out.append((name, value))
    return out


def cmd_rows(args) -> None:
    for row in table1.resolve_rows(args.rows):
        print(row.key, row.arch)


def cmd_table1(args) -> None:
    rows = table1.resolve_rows(args.rows)
    seeds = args.seeds.split()
    if args.rows.strip() == "all":  # the extra rows (RoPE, ALiBi, T5 bias) whose runs are there
        rows = table1.with_present_extras(rows, args.runs_dir, args.ref, args.by, seeds)
    metrics = parse_metrics(args.metrics)
    comet = load_comet(args, "fairseq-attn-paper table1")
    common = dict(tokenize=args.tokenize, bs_samples=args.bs_samples, ar_trials=args.ar_trials,
                  base_size=not args.no_base_size, metrics=metrics, comet=comet, src_path=args.src)
    if seeds:
        table = table1.build_seeds_table(table1.seed_run_dirs(rows, args.runs_dir, seeds, args.by), args.ref, **common)
        md = table1.format_seeds_markdown(table)
    else:
        table = table1.build_table(table1.run_dirs(rows, args.runs_dir, args.by), args.ref, **common)
        md = table1.format_markdown(table)
    print(md)
    if args.md:
        write_text(args.md, md + "\n")
    if args.json:
        write_table(args.json, table)  # its paths relative to its folder (study-export)
    print_comet_hint("fairseq-attn-paper table1", comet, args)


def cmd_figure2(args) -> None:
    check_output_paths(args.png, args.json, args.md)  # before any scoring
    windows = figures.sweep_points(args.ref, _pairs(args.window, "--window", True), args.tokenize, lambda v: dict(
        label=f"--window {v}", arch_contains="csan1d", flags={"csan_window": v}))
    heads = figures.sweep_points(args.ref, _pairs(args.heads, "--heads", True), args.tokenize, lambda v: dict(
        label=f"--heads {v}", arch_contains="csan2d", flags={"csan_heads": v, "csan_window": args.window_2d}))
    if not windows and not heads:
        raise ValueError("give --window W=RUN_DIR and/or --heads N=RUN_DIR")
    if args.baseline and args.baseline_bleu is not None:
        raise ValueError("give --baseline RUN_DIR... (scored here) or --baseline-bleu, not both")
    baseline, baseline_bleu = None, args.baseline_bleu
    if args.baseline:  # its seeds scored like a point: the line's value is measured, never typed
        base_arch = table1.ROW_BY_KEY[BASELINE].arch
        baseline = figures.sweep_points(args.ref, [(0, d) for d in args.baseline], args.tokenize,
                                        lambda _: dict(label="--baseline", arch=base_arch))[0]
        del baseline["value"]
        baseline_bleu = baseline["bleu"]
    figures.plot_figure2(windows, heads, args.png, baseline_bleu, args.window_2d,
                         None if baseline is None else len(baseline["seeds"]))
    data = {"ref": args.ref, "tokenize": args.tokenize, "window_2d": args.window_2d, "windows": windows,
            "heads": heads, "baseline_bleu": baseline_bleu, "baseline": baseline}
    for name, pts in (("1D-CSAN window", windows), ("2D-CSAN heads", heads)):
        for p in pts:
            stale = f" ‡ evaluated before its newest checkpoint ({p['stale']})" if p.get("stale") else ""
            spread = "" if p["bleu_std"] is None else f" ± {p['bleu_std']:.2f} (mean ± std of {len(p['seeds'])} seeds)"
            print(f"{name} {p['value']}: BLEU {p['bleu']:.2f}{spread}{stale}")
    if baseline is not None:
        print(f"baseline: BLEU {baseline['bleu']:.2f} (mean of {len(baseline['seeds'])} seed(s))")
    if args.md:
        write_text(args.md, figures.figure2_markdown(data) + "\n")
    if args.json:
        write_table(args.json, data)  # its paths relative to its folder (study-export)


def cmd_plot_table1(args) -> None:
    table = _load_study(args.table1, "--table1", named=False)  # its numbers alone: no outputs unpacked
    check_output_paths(args.png)
    points = figures.table1_points(table)
    figures.plot_table1(points, args.png, args.title or f"Table 1, BLEU per seed ({os.path.basename(args.table1)})")
    for p in points:
        print(f"{p['name']}: BLEU {p['bleu']:.2f} ({', '.join(f'{b:.2f}' for b in p['bleu_per_seed'])}) {p['mark']}")


def cmd_figure3(args) -> None:
    refs = read_text_lines(args.ref, "reference")
    given = _pairs([args.baseline], "--baseline", False) + _pairs(args.system, "--system", False)
    if len(given) < 2:
        raise ValueError("give at least one --system NAME=HYP")
    runs = {p: Run(p) for _, p in given if os.path.isdir(p)}
    check_distinct(list(runs.values()))
    # what each system trained, from its run record (a translations file: unknown)
    trained = [runs[p].trained_model() if p in runs else None for _, p in given]
    # a run folder named after a Table 1 row must be that row's architecture
    hyps = [(n, figures.system_hyps(args.ref, n, p, None if n not in table1.ROW_BY_KEY else dict(
        label=f"Table 1 row {n}", arch=table1.ROW_BY_KEY[n].arch))) for n, p in given]
    base_name = hyps[0][0]
    data = figures.ngram_improvement(refs, hyps[0], hyps[1:], args.tokenize)
    for entry, model in zip([data["baseline"]] + data["systems"], trained):
        entry["trained_model"] = model
    figures.plot_figure3(data, args.png)
    cells = [model_cell(m) for m in trained]
    print(f"| system | {MODEL_HEADER} | " + " | ".join(f"{o}-gram" for o in data["orders"]) + " |")
    print("|---|---|" + "---:|" * len(data["orders"]))
    print(f"| {base_name} (accuracy) | {cells[0]} | "
          + " | ".join(f"{p:.2f}" for p in data["baseline"]["precisions"]) + " |")
    for s, cell in zip(data["systems"], cells[1:]):
        print(f"| {s['name']} (gap) | {cell} | " + " | ".join(f"{g:+.2f}" for g in s["improvement"]) + " |")
    print()
    print(model_legend(cells))
    if args.json:
        write_json(args.json, data)


def _read_runs(paths: Sequence[str], seeds: Sequence) -> List[Tuple]:
    return [(s, read_text_lines(h, "system output")) for s, h in zip(seeds, paths)]


def _claims_table1(table: Dict, args) -> List[Dict]:
    rows = {}
    for r in table["rows"]:
        if "hyps" in r:  # over seeds
            runs, ups = _read_runs(r["hyps"], r["seeds"]), r["train_ups_per_seed"]
            epochs = r.get("train_ups_epochs_per_seed")  # absent from tables made before they were recorded
        else:
            runs, ups = _read_runs([r["hyp"]], [None]), [r["train_ups"]]
            epochs = [[e["train_ups"] for e in r["epochs"] if "train_ups" in e]] if r.get("epochs") else None
        rows[r["key"]] = {"runs": runs, "params": r["params"], "ups": ups, "ups_epochs": epochs}
    speed = None
    if args.speed:  # refused before any test runs
        speed = side_by_side.read_bench(args.speed, rows, [BASELINE] + [c for c in claims.CSAN if c in rows])
    refs = read_text_lines(table["ref"], "reference")
    return claims.table1_claims(rows, refs, table_tokenize(table), args.bs_samples or table.get("bs_samples", 1000),
                                args.ar_trials or table.get("ar_trials", 10000), speed)


def _claims_figure2(studies: Sequence[Tuple[str, Dict]], args) -> List[Dict]:
    """Claims 5-6 from one or more Figure 2 studies: 2a and 2b may be trained apart (2b at more heads).
    Each sweep comes from one file; the files must score the same reference with the same tokeniser."""
    sweeps: Dict[str, Dict] = {"windows": {}, "heads": {}}
    given: Dict[str, str] = {}
    first, refs, tokenize, window_2d = None, None, None, 11
    for path, data in studies:
        own = read_text_lines(data["ref"], "reference")
        if first is None:
            first, refs, tokenize = path, own, data.get("tokenize", "13a")
        elif own != refs or data.get("tokenize", "13a") != tokenize:
            raise ValueError(f"--figure2 {path}: scored on another reference or tokeniser than {first}: "
                             "the sweeps of one verdict must share them")
        for kind in sweeps:
            points = data.get(kind) or []
            if points and kind in given:
                raise ValueError(f"--figure2: both {given[kind]} and {path} hold a {kind} sweep: give one of them")
            if points:
                given[kind] = path
                sweeps[kind] = {p["value"]: _read_runs(p["hyps"], p["seeds"]) for p in points}
                if kind == "heads":  # the head sweep's window
                    window_2d = data.get("window_2d", 11)
    return claims.figure2_claims(sweeps["windows"], sweeps["heads"], refs, tokenize,
                                 args.bs_samples or 1000, args.ar_trials or 10000, window_2d)


#: what each study's JSON holds (``table1 --json``, ``figure2 --json``): a file without it is refused
STUDY_KEYS = {"--table1": ("rows", "ref"), "--figure2": ("ref", "window_2d")}


def _load_study(path: str, flag: str, scratch: Optional[str] = None, named: bool = True) -> Dict:
    """A study's JSON, refused unless it holds what ``flag``'s command writes (:data:`STUDY_KEYS`, each
    non-empty); a committed one (study-export) read from its own outputs, unpacked into ``scratch``, or
    as it is without ``scratch``. ``named``: the error names the flag before the file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such table")
    if scratch is not None and is_committed(path):  # two may share a name: each unpacked into its own folder
        table = with_outputs(path, os.path.join(scratch, f"{len(os.listdir(scratch))}-{os.path.basename(path)}"))
    else:
        table = load_table(path)
    missing = [k for k in STUDY_KEYS[flag] if not isinstance(table, dict) or table.get(k) in (None, [], "")]
    if missing:
        command = flag.lstrip("-")
        raise ValueError(f"{flag + ' ' if named else ''}{path}: not a JSON of 'fairseq-attn-paper {command} --json' "
                         f"(no {', '.join(missing)})")
    return table


def cmd_claims(args) -> None:
    if not args.table1 and not args.figure2:
        raise ValueError("give --table1 TABLE1.json and/or --figure2 FIGURE2.json")
    if args.speed and not args.table1:
        raise ValueError("--speed decides Table 1's efficiency claim: give --table1 TABLE1.json too")
    check_output_paths(args.json, args.md)
    twice = sorted({f for f in args.figure2 or [] if (args.figure2 or []).count(f) > 1})
    if twice:
        raise ValueError(f"--figure2 {twice[0]} given twice: give 2a's and 2b's files once each")
    with tempfile.TemporaryDirectory(prefix="claims.") as scratch:
        found = []
        if args.table1:
            found += _claims_table1(_load_study(args.table1, "--table1", scratch), args)
        if args.figure2:
            found += _claims_figure2([(f, _load_study(f, "--figure2", scratch)) for f in args.figure2], args)
    report = {"claims": found, "table1": args.table1, "figure2": args.figure2, "speed": args.speed,
              "bs_samples": args.bs_samples or 1000, "ar_trials": args.ar_trials or 10000}
    if args.table1:  # the tests' counts: the table's own unless given
        t1 = load_table(args.table1)
        report.update(bs_samples=args.bs_samples or t1.get("bs_samples", 1000),
                      ar_trials=args.ar_trials or t1.get("ar_trials", 10000))
    md = claims.markdown(report)
    print(md)
    if args.md:
        write_text(args.md, md + "\n")
    if args.json:
        write_table(args.json, report)


def main(argv=None) -> int:
    ap = Parser(prog="fairseq-attn-paper", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    rows_help = (f"'all' (the paper's rows; table1 adds the extra rows "
                 f"{', '.join(r.key for r in table1.EXTRA_ROWS)} whose runs are present) or "
                 f"comma-separated rows, 'all' among them: {', '.join(table1.ROW_BY_KEY)}")

    p = sub.add_parser("rows", help="list the Table 1 rows (KEY ARCH)")
    p.add_argument("--rows", default="all", help=rows_help)
    p.set_defaults(fn=cmd_rows)

    p = sub.add_parser("table1", help="render Table 1 from run directories")
    p.add_argument("--ref", required=True, help="detokenised test reference")
    p.add_argument("--runs-dir", required=True, help="holds one run directory per row")
    p.add_argument("--rows", default="all", help=rows_help)
    p.add_argument("--by", choices=("key", "arch"), default="key",
                   help="run directories are named by row key (recipes) or by architecture (demo)")
    p.add_argument("--no-base-size", action="store_true",
                   help="skip building each architecture at base size for the parameter column")
    p.add_argument("--seeds", default="", metavar='"1 2 3"',
                   help="the seeds of every row: its runs are RUNS_DIR/<key>_seed<N> (SEEDS of table1.sh); scores "
                   "as mean ± std over seeds, a row marked only when every seed pair against the baseline is")
    add_metric_args(p)
    p.add_argument("--src", help="source side of the test set (COMET reads it; needed with COMET_MODEL)")
    p.set_defaults(fn=cmd_table1)

    p = sub.add_parser("figure2", help="plot the window / head sweeps")
    p.add_argument("--ref", required=True, help="detokenised validation reference")
    p.add_argument("--window", nargs="+", default=[], metavar="W=RUN_DIR", help="1D-CSAN runs by window size")
    p.add_argument("--heads", nargs="+", default=[], metavar="N=RUN_DIR", help="2D-CSAN runs by attended heads")
    p.add_argument("--window-2d", type=int, default=11, help="the 2D-CSAN window of the head sweep (label)")
    p.add_argument("--baseline", nargs="+", default=[], metavar="RUN_DIR",
                   help="Table 1 baseline runs (its seeds), scored on --ref: their mean BLEU drawn as a line")
    p.add_argument("--baseline-bleu", type=float, help="draw this BLEU as the baseline's line (typed, not scored)")
    p.add_argument("--png", required=True)
    p.set_defaults(fn=cmd_figure2)

    p = sub.add_parser("plot-table1", help="plot a finished Table 1: BLEU per seed and row, the marks")
    p.add_argument("table1", metavar="TABLE1.json", help="table1 --json (a committed one too)")
    p.add_argument("--png", required=True)
    p.add_argument("--title", help="the plot's title (default: names the file)")
    p.set_defaults(fn=cmd_plot_table1)

    p = sub.add_parser("figure3", help="plot the n-gram accuracy gaps over the baseline")
    p.add_argument("--ref", required=True)
    p.add_argument("--baseline", required=True, metavar="NAME=RUN_DIR|HYP")
    p.add_argument("--system", nargs="+", default=[], metavar="NAME=RUN_DIR|HYP")
    p.add_argument("--png", required=True)
    p.set_defaults(fn=cmd_figure3)

    p = sub.add_parser("claims", help="a verdict per claim of the paper from finished Table 1 / Figure 2 studies")
    p.add_argument("--table1", metavar="TABLE1.json", help="Table 1's table (table1.sh; a committed one: study-export)")
    p.add_argument("--figure2", nargs="+", metavar="FIGURE2.json",
                   help="Figure 2's points (figure2.sh; or a committed one); 2a and 2b trained apart: both files")
    p.add_argument("--speed", metavar="BENCH.json",
                   help="the Table 1 rows' training speed measured side by side (fairseq-attn-bench --json at the "
                        "runs' model size, e.g. --preset bible --data-bin DIR): decides the efficiency claim's speed "
                        "per interleaved round instead of the runs' own steps/s; refused when it lacks a row or "
                        "counts other parameters than the runs")
    p.add_argument("--bs-samples", type=int, help="bootstrap resamples (default: Table 1's, else 1000)")
    p.add_argument("--ar-trials", type=int, help="randomisation trials (default: Table 1's, else 10000)")
    p.add_argument("--md", metavar="FILE", help="also write the verdicts as markdown")
    p.add_argument("--json", metavar="FILE", help="also write the verdicts as JSON")
    p.set_defaults(fn=cmd_claims)

    for p in sub.choices.values():
        if p.prog.endswith(" rows") or p.prog.endswith(" claims") or p.prog.endswith(" plot-table1"):
            continue
        if not p.prog.endswith(" table1"):  # table1's: add_metric_args
            p.add_argument("--tokenize", default="13a", help="sacreBLEU tokeniser (default 13a)")
        p.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
        if p.prog.endswith(" table1") or p.prog.endswith(" figure2"):
            p.add_argument("--md", metavar="FILE", help="also write the table as markdown")
        if p.prog.endswith(" table1"):
            p.add_argument("--bs-samples", type=int, default=1000)
            p.add_argument("--ar-trials", type=int, default=10000)
    args = ap.parse_args(argv)
    try:
        args.fn(args)
    except (table1.Table1Error, FileNotFoundError, ValueError) as e:
        print(f"fairseq-attn-paper {args.cmd}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
