"""A finished study committed with its outputs, and re-checked from them
(:mod:`fairseq_attn_reports.study_bundle`; docs/howto/lengths.md, "Commit a study, and re-check a committed one"):

* ``study-export TABLE.json --to DIR --name NAME [--yes]``: the table to ``DIR/NAME.json`` (its
  markdown to ``DIR/NAME.md``), every file it names packed into ``DIR/NAME/outputs.tar.xz`` with
  ``DIR/NAME/manifest.json`` (sha256 of each, of NAME.json and NAME.md; the versions of sacreBLEU, numpy
  and torch). An existing target is refused without ``--yes``, and so is an output that is not the one
  the table scored (its sha256 then and now).
* ``study-rescore DIR/NAME.json``: every cell and mark of the table computed again from the
  bundle with sacreBLEU and the package's paired tests, NAME.json's other fields and NAME.md against
  the manifest's sha256; exit 0 when all agree, 1 when any differs (each difference printed) or the
  table has no bundle.
* ``study-folder --dir DIR --set VAR=VALUE... [--write]``: a study folder is tied to the settings it
  was made with (``DIR/study_settings.json``; a folder made before it: the ``--patience`` its runs
  were trained with, for ``CONVERGE``): other settings are refused in one line naming both, before
  anything is written; ``--write`` records them in a new folder.
"""

import glob
import json
import os
import sys

from fairseq_attn_records.output_files import write_json
from fairseq_attn_records.run_record import RecordError, load, trained_patiences
from fairseq_attn_reports.study_bundle import export, rescore

from .step_inputs import die

#: the settings a study folder (lengths.sh's LENGTHS_DIR) is made with, beside its tables
SETTINGS = "study_settings.json"


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


def folder_settings(folder: str) -> tuple:
    """(settings, where they were read) of a study folder: its settings file, else the CONVERGE its
    runs' records say (the --patience of the first training of its first run, a folder below it), else
    ({}, None)."""
    path = os.path.join(folder, SETTINGS)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f).get("settings") or {}, path
    for rec_path in sorted(glob.glob(os.path.join(glob.escape(folder), "*", "run.json"))
                           + glob.glob(os.path.join(glob.escape(folder), "*", "*", "run.json"))):
        try:
            rec = load(os.path.dirname(rec_path)) or {}
        except RecordError:
            continue
        if rec.get("trainings"):  # the patience the folder's study was made with: its runs' first training's
            first = trained_patiences({"trainings": rec["trainings"][:1]})
            return {"CONVERGE": str(first[0]) if first else ""}, f"{rec_path}: its first training's --patience"
    return {}, None


def cmd_study_folder(args):
    asked = {}
    for item in args.set:
        var, sep, value = item.partition("=")
        if not sep or not var:
            die(f"--set {item}: give VAR=VALUE")
        asked[var] = value
    have, where = folder_settings(args.dir)
    for var, value in asked.items():
        if where is not None and var in have and have[var] != value:
            show = lambda v: f"{var}={v}" if v else f"no {var}"
            die(f"{args.var}={args.dir} is the study of {show(have[var])} ({where}); {show(value)} is another study: "
                f"give it its own folder (leave {args.var} unset: each setting has its own), or {show(have[var])}")
    if args.write and not os.path.isfile(os.path.join(args.dir, SETTINGS)):
        write_json(os.path.join(args.dir, SETTINGS), {"settings": dict(have, **asked)}, end="\n")


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
    p = sub.add_parser("study-folder", help="refuse settings other than those a study folder was made with; "
                       "--write records them")
    p.add_argument("--dir", required=True, help="the study folder (lengths.sh's LENGTHS_DIR)")
    p.add_argument("--var", default="LENGTHS_DIR", help="the variable that names the folder, for the messages")
    p.add_argument("--set", action="append", default=[], metavar="VAR=VALUE", help="a setting of the study")
    p.add_argument("--write", action="store_true", help="record the settings in a folder that has none")
    p.set_defaults(fn=cmd_study_folder)
