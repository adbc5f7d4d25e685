"""``python -m fairseq_attn_reports.cli.learning_curve --condition LABEL DIR... --names A B...
[--seeds "1 2"] [--points U1,U2 --subset K=SUBSET... --md curve.md --json curve.json --plot-dir DIR]``:
the long-input study's training lengths and learning curves (:mod:`fairseq_attn_reports.learning_curve`).

Each condition's runs are ``DIR/<name>`` (or ``DIR/<name>_seed<N>`` for each of ``--seeds``). Its table
"Training length" is written into ``DIR/lengths.md`` (replacing one written before) and ``training`` of
``DIR/lengths.json``, or with ``--into PREFIX`` (one condition: Table 1's and Figure 2's runs) into
``PREFIX.md`` and ``PREFIX.json``. With ``--points``: the curve table (``--md``, ``--json``) and one plot per system,
``--plot-dir/curve_<name>.png``."""

import json
import os
import sys

from fairseq_attn_records.command_line import Parser
from fairseq_attn_records.output_files import write_text

from .. import learning_curve as lc
from ..study_paths import PATHS_KEY, load_table, write_table

SECTION = "## Training length"


def _with_training(md_text: str, section: str) -> str:
    """``md_text`` with its "Training length" section (one written before) replaced by ``section``."""
    head, sep, _ = md_text.partition(SECTION)
    return head.rstrip("\n") + "\n\n" + section if sep or head else section


def _written_before(path: str, table) -> bool:
    """``path`` holds this very table (as JSON)."""
    try:
        old = load_table(path)
    except (OSError, ValueError):
        return False
    old.pop(PATHS_KEY, None)
    return old == json.loads(json.dumps(table))


def main(argv=None) -> int:
    p = Parser(prog="python -m fairseq_attn_reports.cli.learning_curve", description=__doc__)
    p.add_argument("--condition", action="append", required=True, nargs=2, metavar=("LABEL", "DIR"),
                   help="a training condition's label and its runs' folder (two arguments: a label may hold '=')")
    p.add_argument("--names", nargs="+", required=True)
    p.add_argument("--seeds", default="")
    p.add_argument("--points", help="the updates of the curve, comma-separated")
    p.add_argument("--subset", action="append", default=[], metavar="K=SUBSET")
    p.add_argument("--into", metavar="PREFIX", help="the training table into PREFIX.md and PREFIX.json (one "
                   "--condition; default: DIR/lengths.md and DIR/lengths.json)")
    p.add_argument("--tokenize", default="13a")
    p.add_argument("--md"); p.add_argument("--json"); p.add_argument("--plot-dir")
    args = p.parse_args(argv)
    seeds = args.seeds.split()
    if args.into and len(args.condition) != 1:
        p.error("--into: give one --condition (its training table goes into PREFIX.md and PREFIX.json)")
    try:
        conds = args.condition
        runs = [(label, name, [os.path.join(d, f"{name}_seed{s}") for s in seeds] or [os.path.join(d, name)])
                for label, d in conds for name in args.names]
        for label, d in conds:
            rows = lc.training_table([r for r in runs if r[0] == label])
            md = lc.training_markdown(rows)
            prefix = args.into or os.path.join(d, "lengths")
            md_path, json_path = prefix + ".md", prefix + ".json"
            old = open(md_path, encoding="utf-8").read() if os.path.isfile(md_path) else ""
            write_text(md_path, _with_training(old, md))
            study = load_table(json_path) if os.path.isfile(json_path) else {}
            study["training"] = rows
            write_table(json_path, study)
            print(md)
        if args.points:
            points = [int(u) for u in args.points.split(",")]
            subsets = [s.split("=", 1) for s in args.subset]
            table = lc.curve_table(runs, points, subsets, args.tokenize)
            table["ranking"] = lc.ranking_table(table)
            pngs = {name: os.path.join(args.plot_dir, f"curve_{name}.png") for name in args.names}
            same = _written_before(args.json, table) and all(os.path.isfile(p) for p in pngs.values())
            write_text(args.md, lc.curve_markdown(table))
            write_table(args.json, table)
            if not same:  # the plots of this very table are there: not drawn again
                for name, png in pngs.items():
                    lc.plot_system(table, name, png)
            print(lc.curve_markdown(table))
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
