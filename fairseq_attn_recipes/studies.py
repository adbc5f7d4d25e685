"""A finished study committed with its outputs, and re-checked from them
(:mod:`fairseq_attn_reports.study_bundle`; docs/howto/lengths.md, "Commit a study, and re-check a committed one"):

* ``study-export TABLE.json --to DIR --name NAME [--yes]``: the table to ``DIR/NAME.json`` (its
  markdown to ``DIR/NAME.md``), every file it names packed into ``DIR/NAME/outputs.tar.xz`` with
  ``DIR/NAME/manifest.json`` (sha256 of each). An existing target is refused without ``--yes``.
* ``study-rescore DIR/NAME.json``: every cell and mark of the table computed again from the
  bundle with sacreBLEU and the package's paired tests; exit 0 when all agree, 1 when any
  differs (each difference printed) or the table has no bundle.
"""

import sys

from fairseq_attn_reports.study_bundle import export, rescore

from .step_inputs import die


def cmd_study_export(args):
    try:
        manifest = export(args.table, args.to, args.name, replace=args.yes)
    except (ValueError, OSError) as e:  # BundleError is a ValueError
        die(str(e))
    print(f"{args.to}/{args.name}.json: the table; {args.to}/{args.name}/{manifest['archive']}: "
          f"{len(manifest['files'])} files (sha256 in {args.to}/{args.name}/manifest.json)")
    print(f"re-check: {manifest['recheck']}")


def cmd_study_rescore(args):
    try:
        cmp = rescore(args.table)
    except (ValueError, OSError, KeyError) as e:  # BundleError, and an output that does not read
        die(str(e) if not isinstance(e, KeyError) else f"{args.table}: no {e} in it: not a study table this "
            f"command re-scores")
    for line in cmp.diffs:
        print(f"differs: {line}", file=sys.stderr)
    if cmp.diffs:
        die(f"{args.table}: {len(cmp.diffs)} difference(s) in {cmp.checked} cells re-scored from its outputs")
    print(f"{args.table}: all {cmp.checked} cells re-scored from its outputs agree")


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("study-export", help="commit a finished study: its table, and every output it scores packed "
                       "with sha256 digests, under --to")
    p.add_argument("table", help="the study's table (lengths.json, train_concat.json, curve.json, table1.json, "
                   "figure2.json, fairseq-attn-results --json)")
    p.add_argument("--to", required=True, help="the folder of committed results (docs/results)")
    p.add_argument("--name", required=True, help="the name of the table there (NAME.json, NAME.md, NAME/)")
    p.add_argument("--yes", action="store_true", help="replace a NAME already there")
    p.set_defaults(fn=cmd_study_export)
    p = sub.add_parser("study-rescore", help="re-score a committed study's table from its outputs; exit 1 on any "
                       "difference")
    p.add_argument("table", help="the committed table (docs/results/NAME.json, its outputs in NAME/)")
    p.set_defaults(fn=cmd_study_rescore)
