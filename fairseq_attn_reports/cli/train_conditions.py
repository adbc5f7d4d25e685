"""``python -m fairseq_attn_reports.cli.train_conditions --without A/lengths.json --with B/lengths.json
--md OUT.md --json OUT.json [--train-concat SPEC]``: the long-input study trained with the joined pairs of
TRAIN_CONCAT minus the study trained without them, per system and k, with the paired tests of every pair of
seeds (:mod:`fairseq_attn_reports.train_conditions`); the table printed."""

import os
import sys

from fairseq_attn_records.command_line import Parser
from fairseq_attn_records import comet as comet_metric
from fairseq_attn_records.output_files import write_text

from .. import train_conditions
from ..study_paths import load_table, write_table


def main(argv=None) -> int:
    p = Parser(prog="python -m fairseq_attn_reports.cli.train_conditions", description=__doc__)
    p.add_argument("--without", required=True, help="lengths.json of the study trained without the joined pairs")
    p.add_argument("--with", dest="with_", required=True, help="lengths.json of the study trained with them")
    p.add_argument("--train-concat", help="TRAIN_CONCAT, named in the heading")
    p.add_argument("--tokenize", default="13a")
    p.add_argument("--comet-batch-size", type=int)
    p.add_argument("--md", required=True); p.add_argument("--json", required=True)
    args = p.parse_args(argv)
    try:
        studies = []
        for flag, path in (("--without", args.without), ("--with", args.with_)):
            concat = load_table(path).get("concat")
            if not concat:
                raise ValueError(f"{flag} {path}: no per-k table (concat) in it: run the study's report first")
            studies.append(concat)
        comet = None
        if any("comet" in e["metrics"] for s in studies for e in s["k"].values()):
            path = comet_metric.model_path_from_env()
            if path is None:
                raise ValueError("the studies hold COMET: set COMET_MODEL to the checkpoint they were scored with")
            comet = comet_metric.load(path, batch_size=args.comet_batch_size)
        diff = train_conditions.condition_difference(studies[0], studies[1], args.tokenize, comet)
    except (OSError, ValueError, KeyError) as e:
        print(f"train_conditions: error: {e}", file=sys.stderr)
        return 1
    md = train_conditions.format_markdown(diff, args.train_concat)
    diff["studies"] = {"without": os.path.abspath(args.without), "with": os.path.abspath(args.with_)}
    write_table(args.json, diff)  # its paths (the two studies) relative to its folder
    write_text(args.md, md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
