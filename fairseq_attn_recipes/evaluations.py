"""What an evaluation is made from, so that the same evaluation is not done twice.

An evaluation's key (``evaluated_with``, recorded in ``SUBSET/scores.json`` and the run record's
evaluation) names everything its scores depend on: the settings given (the subset, generation:
``GEN_ARGS``, beam, length penalty, ``N_AVG``; BPE removal, the metrics' settings), the files
evaluated (source and reference, the data's record: sha256 each; those of the data folder named
relative to it, ``$DATA/raw/test.de``) and the checkpoints averaged (file, update number, size,
sha256). ``evaluated-before`` compares the key of an evaluation about to run with the one recorded
in the folder it would be published to: the same evaluation, its outputs intact, is skipped; a
changed one is redone, the changes named. Contents, not places or times: a run copied (``cp -r``:
new file times) or evaluated on a copy of its data is the same evaluation; a checkpoint whose
content changed is not. The folder is the record's place, so a caller evaluating other test files
into another folder gets its own record.
"""

import json
import os
import sys

from fairseq_attn_records import run_record
from fairseq_attn_records.output_files import write_lines

from .step_inputs import die, key_values
from .fingerprints import CHANGED, NOT_DONE, SAME, describe_changes, file_digest, named_in, rebased

KEY = "evaluated_with"
DATA_TAG = "$DATA"
NO_SAVE_POINT = 5  # evaluated-before's answer for a learning curve's point the run has no checkpoint of
TWIN = 6  # evaluated-before's answer when the run holds this very evaluation in another folder
TWIN_FILES = ("averaged.json", "generate.out", "hyp.tok.txt", "hyp.txt")


def _sha256(path: str, size: int, mtime_ns: int, before: dict) -> str:
    """The file's sha256: the one recorded ``before`` (the previous key's entry of that file) where
    its size and time are those recorded with it (unchanged since it was read), else read."""
    if before.get("sha256") and before.get("bytes") == size and before.get("mtime_ns") == mtime_ns:
        return before["sha256"]
    return file_digest(path)["sha256"]


def evaluation_key(run_dir: str, n_avg: int, settings: dict, inputs, data=None, before=None, at_update=None) -> dict:
    """The key of evaluating the average of the newest ``n_avg`` save points of ``run_dir`` with
    ``settings`` on the files ``inputs`` (those inside ``data``, the data folder, named relative to
    it). Each checkpoint's ``mtime_ns`` only says when its sha256 was read (``before``: the key
    recorded, whose sha256 of a file unchanged since is reused); it is not part of the evaluation.
    ``at_update``: the save points up to the one of that update; none of it: said, exit NO_SAVE_POINT."""
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
    was = {c.get("file"): c for c in (before or {}).get("checkpoints") or [] if isinstance(c, dict)}
    checkpoints = []
    for p in points:
        size, mtime = known[p["file"]]["bytes"], known[p["file"]]["mtime_ns"]
        checkpoints.append({"file": p["file"], "num_updates": p["num_updates"], "bytes": size, "mtime_ns": mtime,
                            "sha256": _sha256(os.path.join(run_dir, p["file"]), size, mtime, was.get(p["file"], {}))})
    return {"settings": dict(sorted(settings.items())),
            "inputs": {named_in(f, data, DATA_TAG): file_digest(f)["sha256"] for f in inputs},
            "checkpoints": checkpoints}


def _what_is_evaluated(key: dict, current: dict = None) -> dict:
    """A key without the checkpoints' times; a checkpoint an older evaluate.sh recorded without its
    sha256 is taken as the one ``current`` names where its size and time are those recorded (the
    rule of that evaluate.sh), else it differs."""
    now = {c["file"]: c for c in (current or {}).get("checkpoints") or []}
    out = []
    for c in key.get("checkpoints") or []:
        c = dict(c)
        if "sha256" not in c:
            same = now.get(c.get("file"), {})
            c["sha256"] = same.get("sha256") if (same.get("bytes"), same.get("mtime_ns")) == (c.get("bytes"), c.get("mtime_ns")) \
                else "not recorded"
        c.pop("mtime_ns", None)
        out.append(c)
    return dict(key, checkpoints=out)


def same_evaluation(old: dict, new: dict) -> bool:
    new = json.loads(json.dumps(new))
    return _what_is_evaluated(rebased(old, new, DATA_TAG), new) == _what_is_evaluated(new)


def changes(old: dict, new: dict) -> list:
    """What differs between two keys, one phrase each: a checkpoint whose content changed is named
    with both sha256s."""
    old = _what_is_evaluated(rebased(old, new, DATA_TAG), new)
    new = _what_is_evaluated(new)
    out = describe_changes(old, new)
    name = lambda c: f"{c['file']} (update {c['num_updates']})"
    oc, nc = old.get("checkpoints") or [], new.get("checkpoints") or []
    if [name(c) for c in oc] != [name(c) for c in nc]:
        out.append(f"checkpoints averaged: {', '.join(map(name, oc)) or 'none recorded'} -> {', '.join(map(name, nc))}")
    else:
        for a, b in zip(oc, nc):
            if a != b:
                was = "recorded without its sha256 by an older evaluate.sh, and its size or time changed since" \
                    if a.get("sha256") == "not recorded" else f"sha256 {str(a.get('sha256'))[:12]}, {a.get('bytes')} bytes"
                out.append(f"{name(b)}: its content changed ({was} -> sha256 {b['sha256'][:12]}, {b['bytes']} bytes)")
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
        if not entry.get(KEY) or os.path.realpath(folder) == os.path.realpath(final) \
                or not same_evaluation(entry[KEY], key):
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
    old, why = recorded_key(args.final, args.run_dir, args.subset)
    key = evaluation_key(args.run_dir, args.n_avg, key_values(args.set), args.inputs, args.data, old, args.at_update)
    write_lines(args.out, [json.dumps({KEY: key}, indent=2)])
    if old is None or not same_evaluation(old, key):
        twin = published_twin(args.run_dir, key, args.final)
        if twin:
            print(twin)
            sys.exit(TWIN)
    if old is None:
        if why:
            print(why)
            sys.exit(CHANGED)
        sys.exit(NOT_DONE)
    if same_evaluation(old, key):
        sys.exit(SAME)
    print("; ".join(changes(old, key)))
    sys.exit(CHANGED)


def cmd_run_arch(args):
    """Print the architecture the run of --run-dir was trained as (its run record's, never its
    folder's name); an ARCH the user gave (--given) that is another is refused, naming both."""
    rec = run_record.load(args.run_dir) or {}
    arch = rec.get("arch")
    if args.given and arch and args.given != arch:
        die(f"ARCH={args.given}: SAVE_DIR={args.run_dir} holds a run trained as ARCH={arch} (its run record "
            f"{run_record.record_path(args.run_dir)}): leave ARCH unset (evaluate.sh takes the run's) or give "
            f"ARCH={arch}; to evaluate a {args.given} run, give its SAVE_DIR")
    print(arch or args.given or args.default)


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("run-arch", help="the architecture a run was trained as (its run record); another ARCH "
                       "given is refused")
    p.add_argument("--run-dir", required=True); p.add_argument("--given", help="the ARCH the user set ('' unset)")
    p.add_argument("--default", required=True, help="the architecture of a run whose record names none")
    p.set_defaults(fn=cmd_run_arch)
    p = sub.add_parser("evaluated-before", help="the key of an evaluation (settings, files, checkpoints averaged): "
                       "exit 0 when the folder it publishes to holds this very evaluation, 4 none, 3 another (printed)")
    p.add_argument("--run-dir", required=True); p.add_argument("--n-avg", type=int, required=True)
    p.add_argument("--subset", required=True); p.add_argument("--final", required=True, help="the folder it is published to")
    p.add_argument("--set", action="append", metavar="KEY=VALUE"); p.add_argument("--in", dest="inputs", action="append", default=[])
    p.add_argument("--at-update", type=int, help="the save points up to that update's (exit 5 when the run has none)")
    p.add_argument("--data", help="the data folder: inputs inside it named relative to it ($DATA/...)")
    p.add_argument("--out", required=True); p.set_defaults(fn=cmd_evaluated_before)
