"""What an evaluation is made from, so that the same evaluation is not done twice.

An evaluation's key (``evaluated_with``, recorded in ``SUBSET/scores.json`` and the run record's
evaluation) names everything its scores depend on: the settings given (the subset, generation:
``GEN_ARGS``, beam, length penalty, ``N_AVG``; BPE removal, the metrics' settings), the files
evaluated (source and reference, the data's record: sha256 each) and the checkpoints averaged
(file, update number, size, time). ``evaluated-before`` compares the key of an evaluation about
to run with the one recorded in the folder it would be published to: the same evaluation, its
outputs intact, is skipped; a changed one is redone, the changes named. The folder is the
record's place, so a caller evaluating other test files into another folder gets its own record.
"""

import json
import os
import sys

from fairseq_attn_records import run_record
from fairseq_attn_records.output_files import write_lines

from .step_inputs import die, key_values
from .fingerprints import CHANGED, NOT_DONE, SAME, describe_changes, file_digest

KEY = "evaluated_with"
NO_SAVE_POINT = 5  # evaluated-before's answer for a learning curve's point the run has no checkpoint of
TWIN = 6  # evaluated-before's answer when the run holds this very evaluation in another folder
TWIN_FILES = ("averaged.json", "generate.out", "hyp.tok.txt", "hyp.txt")


def evaluation_key(run_dir: str, n_avg: int, settings: dict, inputs, at_update=None) -> dict:
    """The key of evaluating the average of the newest ``n_avg`` save points of ``run_dir`` (up to
    the one of update ``at_update``) with ``settings`` on the files ``inputs``. No save point of
    ``at_update``: said, exit NO_SAVE_POINT."""
    from .recording import NoSavePoint, last_save_points, scan_checkpoints

    rec = run_record.load(run_dir) or {}
    known = scan_checkpoints(run_dir, rec.get("checkpoints"))
    try:
        points = last_save_points(run_dir, n_avg, known, at_update)
    except NoSavePoint as e:
        print(str(e))
        sys.exit(NO_SAVE_POINT)
    except run_record.RecordError as e:
        die(str(e))
    return {"settings": dict(sorted(settings.items())),
            "inputs": {os.path.abspath(f): file_digest(f)["sha256"] for f in inputs},
            "checkpoints": [{"file": p["file"], "num_updates": p["num_updates"], "bytes": known[p["file"]]["bytes"],
                             "mtime_ns": known[p["file"]]["mtime_ns"]} for p in points]}


def changes(old: dict, new: dict) -> list:
    """What differs between two keys, one phrase each."""
    out = describe_changes(old, new)
    if old.get("checkpoints") != new.get("checkpoints"):
        name = lambda key: ", ".join(f"{c['file']} (update {c['num_updates']})" for c in key.get("checkpoints") or [])
        out.append(f"checkpoints averaged: {name(old) or 'none recorded'} -> {name(new)}")
    return out


def recorded_key(final: str, run_dir: str, subset: str):
    """(key, None) of the evaluation published in ``final``, or (None, why it cannot be reused)."""
    scores = os.path.join(final, "scores.json")
    if not os.path.isfile(scores):
        return None, None
    try:
        with open(scores, encoding="utf-8") as f:
            old = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None, f"{scores} is unreadable"
    if KEY not in old:
        return None, f"{scores} does not record what it was evaluated with (evaluated by an older evaluate.sh)"
    if run_dir:
        entry = ((run_record.load(run_dir) or {}).get("evaluations") or {}).get(subset)
        if entry is None or os.path.realpath(os.path.join(run_dir, entry["dir"])) != os.path.realpath(final):
            return None, f"{run_record.record_path(run_dir)} records no evaluation of {subset} in {final}"
        try:
            run_record.check_evaluation(run_dir, subset, entry)
        except run_record.RecordError as e:
            return None, str(e)
    return old[KEY], None


def published_twin(run_dir: str, key: dict, final: str):
    """The folder of another evaluation the run record holds with this very key (settings, files,
    checkpoints: e.g. a learning curve's point at the update the run's own evaluation averaged alone),
    its outputs intact; None when there is none."""
    try:
        rec = run_record.load(run_dir) or {}
    except run_record.RecordError:
        return None
    for subset, entry in sorted((rec.get("evaluations") or {}).items()):
        folder = os.path.join(run_dir, entry.get("dir", ""))
        if entry.get(KEY) != key or os.path.realpath(folder) == os.path.realpath(final):
            continue
        try:
            run_record.check_evaluation(run_dir, subset, entry)
        except run_record.RecordError:
            continue
        if all(os.path.isfile(os.path.join(folder, f)) for f in TWIN_FILES):
            return folder
    return None


def cmd_evaluated_before(args):
    """Write the key of this evaluation to --out ({"evaluated_with": key}). Exit 0: evaluated before
    with this very key, its outputs intact (skip); 4: not evaluated before; 3: redo (why printed);
    5: --at-update names an update the run holds no checkpoint of (why printed); 6: the run holds this
    very evaluation in another folder (printed: its outputs are taken over, not decoded again)."""
    key = evaluation_key(args.run_dir, args.n_avg, key_values(args.set), args.inputs, args.at_update)
    write_lines(args.out, [json.dumps({KEY: key}, indent=2)])
    old, why = recorded_key(args.final, args.run_dir, args.subset)
    if old != json.loads(json.dumps(key)):
        twin = published_twin(args.run_dir, json.loads(json.dumps(key)), args.final)
        if twin:
            print(twin)
            sys.exit(TWIN)
    if old is None:
        if why:
            print(why)
            sys.exit(CHANGED)
        sys.exit(NOT_DONE)
    if old == json.loads(json.dumps(key)):
        sys.exit(SAME)
    print("; ".join(changes(old, key)))
    sys.exit(CHANGED)


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("evaluated-before", help="the key of an evaluation (settings, files, checkpoints averaged): "
                       "exit 0 when the folder it publishes to holds this very evaluation, 4 none, 3 another (printed)")
    p.add_argument("--run-dir", required=True); p.add_argument("--n-avg", type=int, required=True)
    p.add_argument("--subset", required=True); p.add_argument("--final", required=True, help="the folder it is published to")
    p.add_argument("--set", action="append", metavar="KEY=VALUE"); p.add_argument("--in", dest="inputs", action="append", default=[])
    p.add_argument("--at-update", type=int, help="the save points up to that update's (exit 5 when the run has none)")
    p.add_argument("--out", required=True); p.set_defaults(fn=cmd_evaluated_before)
