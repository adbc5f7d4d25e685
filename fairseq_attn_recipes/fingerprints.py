"""What a step, a data-bin and a run are made from: settings and the size, line count and
sha256 of every input. A stage is redone when its fingerprint changed (``fingerprint``);
``DATA/prepare.json`` records a data-bin (``prepare-record``) and ``check-data`` refuses a
data-bin that does not match its record, its settings or the run trained on it.

A file inside the folder a record belongs to (a step's WORK) is named relative to it
(``$WORK/raw/test.en``), and so is a setting naming a path there: a WORK copied or moved keeps
its records, and its steps are reused where their inputs' contents are the same. A file outside
it (``TRAIN_SRC=/corpus/train.en``) is named by its absolute path. A record of an older
prepare.sh names every file by its absolute path: it is read as written in the folder whose
files it names (:func:`rebased`), so a WORK copied before records named files this way is
reused too, and anything that does not map is redone, the reason named."""

import hashlib
import json
import os
import sys

from fairseq_attn_records.output_files import write_lines

from .run_data import ID_LEN, folder_holding, run_data
from .step_inputs import count_lines, die, key_values


def file_digest(path: str) -> dict:
    """Size, line count and sha256 of a file (a folder: of each file in it, by name)."""
    if os.path.isdir(path):
        return {name: file_digest(os.path.join(path, name)) for name in sorted(os.listdir(path))
                if not name.endswith(".tmp")}
    if not os.path.isfile(path):
        die(f"{path}: no such file")
    h, lines, size = hashlib.sha256(), 0, 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            lines += block.count(b"\n")
            size += len(block)
    return {"bytes": size, "lines": lines, "sha256": h.hexdigest()}


WORK_TAG = "$WORK"


def _under(path: str, folder: str):
    """``path`` (absolute) relative to ``folder`` (given as written or resolved), or None outside it."""
    for base, p in ((os.path.abspath(folder), path), (os.path.realpath(folder), os.path.realpath(path))):
        if p == base:
            return "."
        if p.startswith(base.rstrip(os.sep) + os.sep):
            return os.path.relpath(p, base)
    return None


def named_in(path: str, folder=None, tag: str = WORK_TAG) -> str:
    """How a record names ``path``: ``TAG/relative`` inside ``folder``, else the absolute path."""
    full = os.path.abspath(path)
    rel = _under(full, folder) if folder else None
    if rel is None:
        return full
    return tag if rel == "." else f"{tag}/{rel}"


def _setting_in(value, folder, tag=WORK_TAG):
    """A setting that names a path inside ``folder`` (``DATA=$WORK/data-bin``) named relative to it."""
    if folder and isinstance(value, str) and os.path.isabs(value) and _under(value, folder) is not None:
        return named_in(value, folder, tag)
    return value


def args_in(args, folder) -> list:
    """A command's arguments as a record names them: each one that is a path inside ``folder``
    named relative to it (a folder copied or moved keeps the steps it ran)."""
    return [_setting_in(a, folder) for a in args]


def fingerprint(settings, files, work=None) -> dict:
    """What a step is made from; files and settings inside ``work`` named relative to it."""
    return {"settings": {k: _setting_in(v, work) for k, v in sorted(settings.items())},
            "inputs": {named_in(f, work): file_digest(f) for f in files}}


def rebased(old: dict, new: dict, tag: str = WORK_TAG) -> dict:
    """``old`` as ``new`` names files: a record that names by absolute paths files ``new`` names
    relative to its folder (``TAG/...``: written before records did, here or in a folder since
    copied or moved) read with those paths relative to the folder they lie in. The folder is where
    the absolute paths end as ``new``'s relative ones do (the one that maps most of them); a
    record with no such folder is returned as it is (its files then differ, each named)."""
    if not isinstance(old, dict) or not isinstance(old.get("inputs"), dict):
        return old
    rels = [k[len(tag) + 1:] for k in new.get("inputs", {}) if k.startswith(tag + "/")]
    counts = {}
    for k in old["inputs"]:
        if os.path.isabs(k):
            for r in rels:
                if k.endswith(os.sep + r):
                    base = k[:-len(r) - 1]
                    counts[base] = counts.get(base, 0) + 1
    if not counts:
        return old
    base = max(sorted(counts), key=counts.get)
    rename = lambda v: (tag if v == base else f"{tag}/{v[len(base) + 1:]}") \
        if isinstance(v, str) and (v == base or v.startswith(base + os.sep)) else v
    return dict(old, inputs={rename(k): v for k, v in old["inputs"].items()},
                settings={k: rename(v) for k, v in (old.get("settings") or {}).items()})


def describe_changes(old: dict, new: dict) -> list:
    """Human-readable differences between two fingerprints."""
    out = []
    for k in sorted(set(old.get("settings", {})) | set(new.get("settings", {}))):
        a, b = old.get("settings", {}).get(k), new.get("settings", {}).get(k)
        if a != b:
            out.append(f"{k}: {a!r} -> {b!r}")
    oi, ni = old.get("inputs", {}), new.get("inputs", {})
    for f in sorted(set(oi) | set(ni)):
        if f not in oi:
            out.append(f"new input {f}")
        elif f not in ni:
            out.append(f"input no longer used: {f}")
        elif oi[f] != ni[f]:
            out.append(f"input changed: {f}")
    return out


#: the answers of ``fingerprint`` and ``evaluated-before`` (their exit status): done before from the
#: same settings and inputs, changed since, never done. 1 and 2 stay what they are for every command
#: (a refused input or failed step; a usage error), so an error is never read as an answer.
SAME, CHANGED, NOT_DONE = 0, 3, 4


def stage_state(record_path, new: dict):
    """The resume rule of the recipes and the demo: ``(SAME, "")`` when the stage's record says it
    was done from these very settings and inputs (skipped), ``(NOT_DONE, "")`` when there is no
    record (done), ``(CHANGED, changes)`` when they changed (redone). A stage is recorded only once
    complete. A record naming files by absolute paths is read as :func:`rebased` says."""
    if not record_path or not os.path.isfile(record_path):
        return NOT_DONE, ""
    with open(record_path, encoding="utf-8") as f:
        try:
            old = json.load(f)
        except json.JSONDecodeError:
            old = {}
    old = rebased(old, new)
    if old == json.loads(json.dumps(new)):
        return SAME, ""
    if not isinstance(old, dict):
        return CHANGED, "record unreadable"
    changes = describe_changes(old, new)
    elsewhere = [k for k in old.get("inputs") or {} if os.path.isabs(k) and k not in new["inputs"]]
    if elsewhere and any(k.startswith(WORK_TAG + "/") for k in new["inputs"]):
        changes.append(f"the record names files by absolute paths ({elsewhere[0]}...), as an older recipe wrote "
                       f"them, that are not this WORK's files")
    return CHANGED, "; ".join(changes) or "record unreadable"


#: a stage whose outputs are kept per setting (binarise: each data setting its own folder, WORK/data/<id>)
#: records one entry per setting, ``{"per_setting": [fingerprint with "made", ...]}``, "made" naming its
#: output relative to WORK: a study alternating two settings (lengths.sh's TRAIN_CONCAT conditions)
#: does each once, and a setting done before is skipped while its output is there
PER_SETTING, MADE = "per_setting", "made"


def _load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def setting_entries(record) -> list:
    """The entries of a per-setting record ([] for none, or a record of one setting written before
    records were kept per setting: its output unnamed, so the stage is done once more)."""
    if isinstance(record, dict) and isinstance(record.get(PER_SETTING), list):
        return [e for e in record[PER_SETTING] if isinstance(e, dict)]
    return []


def per_setting_state(record_path, new: dict, work: str):
    """The resume rule of a per-setting stage: ``(state, changes, kept)``, ``kept`` the entries of
    the other settings (and, when SAME, this one's). No entry of these settings, or its output gone:
    NOT_DONE; the same settings and inputs: SAME; its inputs changed: CHANGED."""
    new = json.loads(json.dumps(new))
    entries = setting_entries(_load(record_path) if record_path else None)
    others = [e for e in entries if e.get("settings") != new["settings"]]
    mine = [e for e in entries if e.get("settings") == new["settings"]]
    made = mine[-1].get(MADE) if mine else None
    if not made or not os.path.isfile(os.path.join(work, made, "prepare.json")):
        return NOT_DONE, "", others
    if {k: v for k, v in mine[-1].items() if k != MADE} == new:
        return SAME, "", entries
    return CHANGED, "; ".join(describe_changes(mine[-1], new)) or "record unreadable", others


def made_by_setting(record_path, settings: dict, work: str):
    """The output (relative to ``work``) a per-setting record names for these settings, or None."""
    want = fingerprint(settings, [], work)["settings"]
    mine = [e for e in setting_entries(_load(record_path)) if e.get("settings") == want]
    return mine[-1].get(MADE) if mine else None


def mark_made(record_path, made: str) -> None:
    """Name the output of the entry a per-setting stage is making (the last of its ``.want``)."""
    record = _load(record_path)
    entries = setting_entries(record)
    if not entries:
        die(f"{record_path}: no per-setting record to name {made} in")
    entries[-1][MADE] = made
    write_lines(record_path, [json.dumps({PER_SETTING: entries}, sort_keys=True)])


def cmd_fingerprint(args):
    """What a stage is made from. Exit 0: same as --against; 4: no record; 3: changed (printed).
    ``--per-setting``: one entry per setting in --against (:data:`PER_SETTING`); the entry of these
    settings is taken out of it before the stage is (re)done, so a failed stage leaves none."""
    new = fingerprint(key_values(args.set), args.inputs, args.work)
    if args.per_setting:
        state, changes, kept = per_setting_state(args.against, new, args.work)
        write_lines(args.out, [json.dumps({PER_SETTING: kept + ([] if state == SAME else [new])}, sort_keys=True)])
        if state != SAME and args.against and os.path.isfile(args.against):
            write_lines(args.against, [json.dumps({PER_SETTING: kept}, sort_keys=True)])
    else:
        write_lines(args.out, [json.dumps(new, sort_keys=True)])
        state, changes = stage_state(args.against, new)
    if state == CHANGED:
        print(changes)
    sys.exit(state)


# Test sets derived from a data folder's own test set after it was prepared (the joined inputs of
# lengths.sh's CONCAT: DATA/concat/*.bin|idx and DATA/raw/concat/*): evaluation-only subsets with
# their own records (the stage that builds them, the runs' evaluations), not part of the data's identity
DERIVED_TEST_SETS = "concat"


def data_digest(folder: str) -> dict:
    """The digest that identifies a data folder: every file but prepare.json and the derived test sets."""
    data = {k: v for k, v in file_digest(folder).items() if k not in ("prepare.json", DERIVED_TEST_SETS)}
    if isinstance(data.get("raw"), dict):
        data["raw"] = {k: v for k, v in data["raw"].items() if k != DERIVED_TEST_SETS}
    return data


def _data_id(digest: dict) -> str:
    return hashlib.sha256(json.dumps(digest, sort_keys=True).encode()).hexdigest()


def settable(settings: dict) -> dict:
    """A data folder's recorded settings as the variables a user sets for prepare.sh: the cleaning
    (recorded as one setting, ``CLEAN=MIN-MAX-RATIO``) as CLEAN_MIN, CLEAN_MAX and CLEAN_RATIO."""
    out = dict(settings)
    clean = str(out.get("CLEAN", "")).split("-")
    if len(clean) == 3:
        del out["CLEAN"]
        out.update(CLEAN_MIN=clean[0], CLEAN_MAX=clean[1], CLEAN_RATIO=clean[2])
    return out


def inputs_summary(rec: dict) -> str:
    """The files a prepare was given (prepare.json ``inputs``): name, path, size, sha256."""
    inputs = rec.get("inputs")
    if inputs is None:
        return "inputs: not recorded (prepared before prepare.json named its inputs)"
    if not inputs:
        return "inputs: none recorded"
    size = lambda i: "" if i.get("bytes") is None else f"{i['bytes']} bytes, "
    named = lambda i: f"downloaded {i['path']}" if i["name"] == "download" else f"{i['name']}={i['path']}"
    return "inputs: " + ", ".join(f"{named(i)} ({size(i)}sha256 {i['sha256'][:12]})" for i in inputs)


def recorded_inputs(named, raw_record=None, downloads=None) -> list:
    """The files a prepare was given: ``named`` (NAME=PATH: TRAIN_SRC, ...) with the size and
    sha256 the raw step recorded when it read them (``raw_record``: its stage marker; read again
    where it has none), and the archives downloaded into WORK (``downloads``: the sums file
    ``download`` keeps, NAME beside its sha256; the archive's size where it is still there)."""
    digests = {}
    if raw_record and os.path.isfile(raw_record):
        with open(raw_record, encoding="utf-8") as f:
            try:
                digests = json.load(f).get("inputs", {})
            except json.JSONDecodeError:
                digests = {}
    out = []
    for name, path in key_values(named).items():
        path = os.path.abspath(path)
        # the raw step's record names a file inside WORK relative to it (WORK/.done/raw: its WORK)
        work = os.path.dirname(os.path.dirname(os.path.abspath(raw_record))) if raw_record else None
        d = digests.get(path) or digests.get(named_in(path, work)) or file_digest(path)
        out.append({"name": name, "path": path, "bytes": d["bytes"], "sha256": d["sha256"]})
    if downloads and os.path.isfile(downloads):
        folder = os.path.join(os.path.dirname(os.path.abspath(downloads)), "downloads")
        with open(downloads, encoding="utf-8") as f:
            for line in f:
                sha, _, fname = line.strip().partition("  ")
                if not fname:
                    continue
                path = os.path.join(folder, fname)
                size = os.path.getsize(path) if os.path.isfile(path) else None
                out.append({"name": "download", "path": path, "bytes": size, "sha256": sha})
    return out


def cmd_prepare_record(args):
    """Write DATA/prepare.json: the settings, the training-pair counts and the digests of the
    test reference and of every data-bin file (checked by train.sh and evaluate.sh)."""
    parts = {}
    if args.parts and os.path.isfile(args.parts):
        with open(args.parts, encoding="utf-8") as f:
            parts = json.load(f)
    cap = None
    if args.clean_record and os.path.isfile(args.clean_record):
        with open(args.clean_record, encoding="utf-8") as f:
            cap = json.load(f).get("cap")
    joined = None  # TRAIN_CONCAT: the joined pairs added to the training set (concat-train's record)
    if getattr(args, "concat_record", None):
        with open(args.concat_record, encoding="utf-8") as f:
            joined = json.load(f)
    data = data_digest(args.data)
    record = {
        "recipe": args.recipe,  # whose prepare.sh wrote it: the only one that may replace it (prepare_dest.py)
        "settings": dict(sorted(key_values(args.set).items())),
        "inputs": recorded_inputs(args.input, args.raw_record, args.downloads),
        "train_pairs": {"raw": count_lines(args.raw_train), "clean": count_lines(args.clean_train),
                        "parts": parts.get("parts", {}), "missing_parts": parts.get("missing", []),
                        "partial": bool(parts.get("partial", False)), "cap": cap},
        "test_ref": file_digest(args.test_ref),
        "data_id": _data_id(data),
        "data_bin": data,
    }
    if joined is not None:
        record["train_pairs"]["concat"] = joined
    write_lines(os.path.join(args.data, "prepare.json"), [json.dumps(record, indent=2)])


def refuse_other_run_data(run_dir: str, data: str, data_id: str, want: dict) -> None:
    """A run (its run.json or data.json) trained on other data than ``data``: one line with the fix,
    the run's own data folder and the settings it was prepared with that differ from ``want``."""
    found = run_data(run_dir)
    if found is None or found[1] == data_id:
        return
    path, run_id, settings = found
    have, now = settable(settings), settable(want)
    differ = " ".join(f"{k}={v}" for k, v in sorted(have.items()) if v not in ("", None) and now.get(k) != v)
    differ += "".join(f" {k}=" for k in sorted(now) if now[k] not in ("", None) and k not in have)
    with_settings = f" with {differ.strip()}" if differ.strip() else ""
    # the run's data in this WORK (beside the data-bin's folder, WORK/data/<id>: a WORK copied with its
    # runs holds it), else where it was trained
    here = folder_holding([os.path.join(os.path.dirname(os.path.realpath(data)), run_id[:ID_LEN])], run_id)
    if here:
        path = os.path.realpath(here)
    if path and os.path.isdir(path):
        fix = f"to continue it, give DATA={path}{with_settings}"
    else:
        fix = (f"that folder no longer exists: to continue the run, prepare its data again (prepare.sh"
               f"{with_settings}, with the files it was given) and give DATA=<that folder>")
    die(f"SAVE_DIR={run_dir} holds a run trained on {path} (data_id {run_id[:ID_LEN]}), not on {data} "
        f"(data_id {data_id[:ID_LEN]}): {fix}; to train a new run on {data}, give another SAVE_DIR")


def cmd_check_data(args):
    """The data-bin matches the settings of this run and its record; a run directory was
    trained on this very data-bin (--run-dir: recorded on first use unless --no-record, or --require it)."""
    path = os.path.join(args.data, "prepare.json")
    if not os.path.isfile(path):
        die(f"{args.data} has no prepare.json (not made by this prepare.sh, or by an older one): "
            f"re-run prepare.sh")
    with open(path, encoding="utf-8") as f:
        rec = json.load(f)
    want = dict(sorted(key_values(args.set).items()))
    if args.run_dir:  # a run of other data first: its fix (the run's data) makes the other checks pass
        refuse_other_run_data(args.run_dir, args.data, rec["data_id"], want)
    # the same data made with other settings too (data-place): any of its ways describes it
    for way in rec.get("also_prepared_as", []):
        if way.get("settings") == want and rec["settings"] != want:
            rec = dict(rec, settings=way["settings"], train_pairs=way["train_pairs"])
    have_pair = (rec["settings"].get("SRC"), rec["settings"].get("TGT"))
    want_pair = (want.get("SRC"), want.get("TGT"))
    if None not in want_pair and have_pair != want_pair:  # another recipe's WORK: the pair says it all
        die(f"{args.data} holds {'-'.join(map(str, have_pair))} data, not {'-'.join(want_pair)}: this WORK (or "
            f"DATA) was prepared for another language pair; give the WORK of a {'-'.join(want_pair)} prepare.sh "
            f"(or run prepare.sh with another WORK)")
    there, here = settable(rec["settings"]), settable(want)
    diff = [f"{k}={there.get(k)!r} there, {k}={here.get(k)!r} here"
            for k in sorted(set(here) | set(there)) if there.get(k) != here.get(k)]
    if diff:
        die(f"{args.data} was prepared with other settings: " + "; ".join(diff) +
            ". Run with the settings it was prepared with, or re-run prepare.sh with these (each prepared data keeps "
            "its own folder in WORK/data)")
    data = data_digest(args.data)
    if _data_id(data) != rec["data_id"]:
        changed = sorted(set(data) ^ set(rec["data_bin"]) |
                         {k for k in set(data) & set(rec["data_bin"]) if data[k] != rec["data_bin"][k]})
        die(f"{args.data} changed after prepare.sh wrote it ({', '.join(changed)}): re-run prepare.sh "
            f"({inputs_summary(rec)})")
    if args.test_ref and file_digest(args.test_ref) != rec["test_ref"]:
        die(f"{args.test_ref} is not the test reference {args.data} was prepared with: re-run prepare.sh "
            f"({inputs_summary(rec)})")
    if args.run_dir:
        run_rec = os.path.join(args.run_dir, "data.json")
        if os.path.isfile(run_rec):
            pass  # the data it names: refuse_other_run_data above
        elif args.require:
            die(f"{args.run_dir} has no data.json: no record of the data its model was trained on "
                f"(trained by an older train.sh?); train it again with train.sh")
        elif args.record:
            os.makedirs(args.run_dir, exist_ok=True)
            write_lines(run_rec, [json.dumps({"data": os.path.realpath(args.data), "data_id": rec["data_id"],
                                                     "settings": rec["settings"],
                                                     "train_pairs": rec["train_pairs"]}, indent=2)])
    if args.print_pairs:
        print(json.dumps({"train_pairs": rec["train_pairs"]["clean"], "train_pairs_raw": rec["train_pairs"]["raw"],
                          "train_pairs_by_part": rec["train_pairs"]["parts"],
                          "train_data_partial": rec["train_pairs"]["partial"],
                          "train_cap": rec["train_pairs"].get("cap"),
                          "prepare_settings": rec["settings"]}))


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("fingerprint"); p.add_argument("--set", action="append"); p.add_argument("--out", required=True)
    p.add_argument("--against"); p.add_argument("--in", dest="inputs", action="append", default=[])
    p.add_argument("--work", help="the folder the record belongs to: files and settings inside it named relative to it")
    p.add_argument("--per-setting", action="store_true",
                   help="the record keeps one entry per setting, each naming its output (binarise's data folders)")
    p.set_defaults(fn=cmd_fingerprint)
    p = sub.add_parser("prepare-record"); p.add_argument("--data", required=True); p.add_argument("--set", action="append")
    p.add_argument("--recipe", help="the recipe whose prepare.sh writes it (recipes/<recipe>)")
    p.add_argument("--raw-train", required=True); p.add_argument("--clean-train", required=True)
    p.add_argument("--test-ref", required=True); p.add_argument("--parts")
    p.add_argument("--clean-record", help="the clean step's record (the TRAIN_MAX_LEN cap)")
    p.add_argument("--concat-record", help="concat-train's record (the joined pairs of TRAIN_CONCAT)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=PATH", help="a file the prepare was given (TRAIN_SRC=...)")
    p.add_argument("--raw-record", help="the raw step's marker (the digests of the files it read)")
    p.add_argument("--downloads", help="WORK/downloads.sha256 (the archives downloaded)"); p.set_defaults(fn=cmd_prepare_record)
    p = sub.add_parser("check-data"); p.add_argument("--data", required=True); p.add_argument("--set", action="append")
    p.add_argument("--test-ref"); p.add_argument("--run-dir"); p.add_argument("--require", action="store_true")
    # the nodes of one multi-node training share SAVE_DIR: node 0 records its data.json, the others
    # only check it (two writers of one file race: one's rename finds the other's gone)
    p.add_argument("--no-record", dest="record", action="store_false",
                   help="check --run-dir's data.json where it exists, never write it")
    p.add_argument("--print-pairs", action="store_true"); p.set_defaults(fn=cmd_check_data)
