"""Prepared data that coexist in one WORK, keyed by fingerprint.

Layout (prepare.sh without an explicit ``DATA``)::

    WORK/data/<first 12 hex of data_id>/   one folder per prepared data: the data-bin,
        prepare.json                       its record (settings, training pairs, data_id)
        raw/{valid,test}.{SRC,TGT}         the raw (detokenised) valid/test source and reference
    WORK/data-bin -> data/<id>             relative symlink naming the latest prepared folder

``data-place`` moves a finished data-bin there (a folder with that id already holding the same
data is kept; one holding other data, changed by hand, is moved aside to ``<id>.changed``) and repoints ``data-bin`` in one rename. A run records the resolved folder
(``run.json`` ``data.path``, ``data.json``); ``run-data`` finds it again for evaluate.sh.
``data-list`` / ``data-prune`` show the folders with the runs that name them; ``data-prune`` shows
the folders no run record (nor ``data-bin``) names, with their sizes and why, and removes them only
with ``--yes``.

A run may lie outside WORK (``SAVE_DIR=/elsewhere``): train.sh registers every run folder in the
WORK whose data it trains on, with that data (``WORK/runs.index``, one JSON object a line,
``register-run``), and list and prune read the runs registered there beside those found under
WORK. A registered folder that no longer exists is listed as gone and still keeps the data it
named: a moved or renamed run is not a removed one. ``data-register`` records a run's new place,
``data-forget`` (or ``data-prune --yes --forget-gone``) says that a gone run was removed.
"""

import argparse
import fcntl
import json
import os
import shlex
import shutil
import sys

from fairseq_attn_records.output_files import write_lines

from .step_inputs import die, key_values
from .fingerprints import inputs_summary, made_by_setting, mark_made, settable
from .run_data import ID_LEN, folder_holding, load_json as _load_json, read_prepare, run_data

LINK = "data-bin"
RUN_INDEX = "runs.index"


def _data_id(folder: str):
    rec = read_prepare(folder)
    return rec.get("data_id") if rec else None


def cmd_data_place(args):
    """Move the finished data-bin ``--tmp`` to WORK/data/<id> (kept when it already holds the same
    data_id) and point WORK/data-bin at it (a temporary symlink renamed over the old one)."""
    data_id = _data_id(args.tmp)
    if not data_id:
        die(f"{args.tmp} has no prepare.json: the data-bin was not recorded")
    root = os.path.join(args.work, "data")
    os.makedirs(root, exist_ok=True)
    dest = os.path.join(root, data_id[:ID_LEN])
    if os.path.isdir(dest) and not os.path.islink(dest) and _data_id(dest) == data_id:
        also_prepared_as(dest, read_prepare(args.tmp))
        shutil.rmtree(args.tmp)
        kept = True
    else:
        if os.path.islink(dest):
            os.remove(dest)
        elif os.path.lexists(dest):  # not the data its name says (changed by hand?): kept aside, never deleted
            aside = _free_name(dest + ".changed")
            os.replace(dest, aside)
            print(f"{dest} did not hold the data its name says (changed by hand?): moved to {aside}", file=sys.stderr)
        os.replace(args.tmp, dest)
        kept = False
    made = os.path.join("data", data_id[:ID_LEN])
    if args.record:  # the binarise step's record of these settings names the folder it made
        mark_made(args.record, made)
    link = point_link(args.work, made)
    print(f"{dest} ({'the same data was prepared before: kept' if kept else 'new'}); {link} -> {made}")


def _free_name(path: str) -> str:
    """``path``, or ``path.2``, ``path.3``... : the first that does not exist."""
    name, n = path, 1
    while os.path.lexists(name):
        n += 1
        name = f"{path}.{n}"
    return name


def point_link(work: str, made: str) -> str:
    """Point WORK/data-bin at ``made`` (WORK/data/<id>, named relative to WORK) in one rename."""
    link = os.path.join(work, LINK)
    if os.path.isdir(link) and not os.path.islink(link):
        _adopt_folder(link, os.path.join(work, "data"))
    tmp_link = link + ".tmp"
    if os.path.lexists(tmp_link):
        os.remove(tmp_link)
    os.symlink(made, tmp_link)
    os.replace(tmp_link, link)  # rename(2): as `mv -T`, data-bin is never missing
    return link


def cmd_data_point(args):
    """Point WORK/data-bin at the data folder binarise made for these settings (its per-setting
    record): the data of a setting binarised before is reused, not made again."""
    made = made_by_setting(args.record, key_values(args.set), args.work)
    if not made or not os.path.isfile(os.path.join(args.work, made, "prepare.json")):
        die(f"{args.record} names no data folder for these settings: re-run prepare.sh")
    link = os.path.join(args.work, LINK)
    if os.path.islink(link) and os.readlink(link) == made:
        return
    point_link(args.work, made)
    print(f"{link} -> {made} (the data of these settings, binarised before)")


def also_prepared_as(dest: str, new: dict) -> None:
    """The same data (same data_id) made with other settings (e.g. a cap that drops only pairs the
    cleaning drops anyway): those settings are recorded beside the first ones, in
    prepare.json's ``also_prepared_as``, so that train.sh/evaluate.sh accept either."""
    rec = read_prepare(dest)
    if rec["settings"] == new["settings"]:
        return
    ways = rec.setdefault("also_prepared_as", [])
    if any(w.get("settings") == new["settings"] for w in ways):
        return
    ways.append({"settings": new["settings"], "train_pairs": new["train_pairs"]})
    write_lines(os.path.join(dest, "prepare.json"), [json.dumps(rec, indent=2)])
    print(f"{dest}: the same data as prepared with {prepare_vars(rec['settings'])}; "
          f"these settings are recorded beside those (also_prepared_as)")


def _adopt_folder(link: str, root: str) -> None:
    """A data-bin folder of an older prepare.sh: moved to WORK/data/<its id> (runs trained on it
    find it there by their data_id), or refused when it has no record."""
    old_id = _data_id(link)
    if not old_id:
        die(f"{link} is a folder without prepare.json (not made by prepare.sh): move it away and re-run prepare.sh")
    dest = os.path.join(root, old_id[:ID_LEN])
    if os.path.isdir(dest) and _data_id(dest) == old_id:
        shutil.rmtree(link)  # the same data is kept in WORK/data
    else:
        os.replace(link, dest)
    print(f"{link}: the data-bin folder of an older prepare.sh moved to {dest}")


# ---------------------------------------------------------------- run records
def settings_summary(settings: dict) -> str:
    cap = settings.get("TRAIN_MAX_LEN") or "none"
    return (f"{settings.get('SRC')}-{settings.get('TGT')} cap={cap} "
            f"bpe={settings.get('BPE_TOOL')}:{settings.get('BPE_MERGES')} joint={settings.get('JOINT')}")


def prepare_vars(settings: dict) -> str:
    """The prepare.sh variables a data folder was made with (those that are set), as a user sets them."""
    return " ".join(f"{k}={v}" for k, v in sorted(settable(settings).items()) if v not in ("", None) and k != "DATA")


def _same_folder(a: str, b: str) -> bool:
    return bool(a and b) and os.path.realpath(a) == os.path.realpath(b)


def cmd_run_data(args):
    """Print the data folder of the run in --run-dir: WORK/data/<id> where it holds the data_id
    recorded (the WORK evaluating it: a WORK copied or moved with its runs reads its own data),
    else the folder its record names. --data (an explicit DATA) must be
    that data. A folder that no longer exists: one line naming the run and the folder."""
    found = run_data(args.run_dir)
    if found is None:
        die(f"{args.run_dir} has no record of the data its model was trained on (run.json data, data.json): "
            f"train it again with train.sh")
    path, data_id, settings = found
    if args.data:
        have = _data_id(args.data)
        if have != data_id:
            what = f"data_id {have[:ID_LEN]}" if have else "no prepare.json"
            die(f"DATA={args.data} ({what}) is not the data the run {args.run_dir} was trained "
                f"on ({path}, data_id {data_id[:ID_LEN]}): unset DATA to evaluate on the run's own data")
        print(os.path.realpath(args.data))
        return
    # WORK's own folder of that data first: a run copied or moved with its WORK (or evaluated in a
    # copy of it) reads the data of the WORK it is evaluated in, not the folder it was trained on
    own = folder_holding([os.path.join(args.work, "data", data_id[:ID_LEN]) if args.work else None, path], data_id)
    if own:
        print(os.path.realpath(own))
        return
    rec = _load_json(os.path.join(args.run_dir, "run.json")) or {}
    inputs = ((rec.get("data") or {}).get("inputs") if isinstance(rec, dict) else None)
    die(f"the run {args.run_dir} was trained on {path} (data_id {data_id[:ID_LEN]}), which no longer exists: "
        f"re-run prepare.sh with the settings it was prepared with ({prepare_again({'settings': settings, 'inputs': inputs})}) "
        f"or train again")


# ---------------------------------------------------------------- list and prune
def registrations(work: str):
    """The runs registered in WORK/runs.index, in registration order: ``{"run": absolute folder,
    "data_id": the data it trains on, "data": that data's folder}``, one JSON object a line (a
    folder inside WORK written relative to it). A line of an older train.sh is the folder's path
    alone (its data unknown: ``data_id`` None)."""
    path = os.path.join(work, RUN_INDEX)
    if not os.path.isfile(path):
        return []
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            try:
                entry = json.loads(line) if line.startswith("{") else None
            except json.JSONDecodeError:
                entry = None
            if not isinstance(entry, dict) or not entry.get("run"):
                entry = {"run": line}
            out.append({"run": _from_index(work, entry["run"]), "data_id": entry.get("data_id"),
                         "data": _from_index(work, entry.get("data"))})
    return out


# a folder inside WORK is registered relative to it (a WORK copied or moved registers its own runs
# and data), one outside by its absolute path
def _from_index(work: str, path):
    return path if not path or os.path.isabs(path) else os.path.join(os.path.realpath(work), path)


def _to_index(work: str, path):
    if not path:
        return path
    rel = os.path.relpath(path, os.path.realpath(work))
    return path if rel == os.curdir or rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def registered_runs(work: str):
    """The run folders registered in WORK/runs.index (absolute paths, in registration order)."""
    return [r["run"] for r in registrations(work)]


def _write_registrations(work: str, regs) -> None:
    write_lines(os.path.join(work, RUN_INDEX),
                [json.dumps({k: _to_index(work, r[k]) if k != "data_id" else r[k] for k in ("run", "data_id", "data")
                             if r.get(k)}) for r in regs])


class _IndexLock:
    """WORK/runs.index.lock held exclusively while the index is read and rewritten."""

    def __init__(self, work: str):
        os.makedirs(work, exist_ok=True)
        self.path = os.path.join(work, RUN_INDEX + ".lock")

    def __enter__(self):
        self.file = open(self.path, "w")
        fcntl.flock(self.file, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        self.file.close()


def register_run(work: str, run_dir: str, data: str = None) -> bool:
    """Add ``run_dir`` to WORK/runs.index with the data it trains on (``data``: its folder, whose
    prepare.json gives the data_id; without it, the run's own record), under a lock, written aside
    then renamed; a registration without its data gets it. False when nothing changed."""
    run_dir = os.path.realpath(run_dir)
    data_id, data_path = (_data_id(data), os.path.realpath(data)) if data else (None, None)
    if not data_id:
        found = run_data(run_dir) if os.path.isdir(run_dir) else None
        data_path, data_id = (found[0], found[1]) if found else (None, None)
    with _IndexLock(work):
        regs = registrations(work)
        for r in regs:
            if r["run"] == run_dir:
                if r["data_id"] == data_id or not data_id:
                    return False
                r["data_id"], r["data"] = data_id, data_path
                break
        else:
            regs.append({"run": run_dir, "data_id": data_id, "data": data_path})
        _write_registrations(work, regs)
    return True


def owning_work(data: str):
    """The WORK whose ``data`` folder this is (``WORK/data/<first 12 hex of its data_id>``), or None."""
    folder = os.path.realpath(data)
    data_id = _data_id(folder)
    parent = os.path.dirname(folder)
    if data_id and os.path.basename(parent) == "data" and os.path.basename(folder) == data_id[:ID_LEN]:
        return os.path.dirname(parent)
    return None


def cmd_register_run(args):
    """The run registered in WORK and, when its data lies in another WORK's data folder, in that
    WORK too (whose prune would otherwise see no run naming it)."""
    register_run(args.work, args.run_dir, args.data)
    owner = owning_work(args.data) if args.data else None
    if owner and not _same_folder(owner, args.work):
        if register_run(owner, args.run_dir, args.data):
            print(f"{os.path.realpath(args.run_dir)}: registered in {os.path.join(owner, RUN_INDEX)} too "
                  f"(the WORK holding its data {os.path.realpath(args.data)})", file=sys.stderr)


def _names_folder(ref_path, ref_id, folder, folder_id) -> bool:
    return _same_folder(ref_path, folder) or bool(folder_id and ref_id == folder_id)


def cmd_register(args):
    """``data.sh register DIR``: a run folder (a moved run's new place) registered in WORK, so that
    list and prune see it; its data must be one of WORK/data's."""
    run_dir = os.path.realpath(args.run_dir)
    if not os.path.isdir(run_dir):
        die(f"data.sh register {args.run_dir}: no such folder; give the run folder (SAVE_DIR) where it lies now")
    found = run_data(run_dir)
    if found is None:
        die(f"data.sh register {args.run_dir}: no run record there (run.json or data.json naming its data): "
            f"give a folder train.sh trained")
    path, data_id, _ = found
    ours = [folder for _, folder, rec, _ in data_folders(args.work) if _names_folder(path, data_id, folder, (rec or {}).get("data_id"))]
    if not ours:
        die(f"data.sh register {args.run_dir}: its data ({path}, data_id {data_id[:ID_LEN]}) is not in "
            f"{os.path.join(args.work, 'data')}: register it in the WORK that holds its data")
    changed = register_run(args.work, run_dir, ours[0])
    said = "registered" if changed else "registered before"
    print(f"{run_dir}: {said} in {os.path.join(args.work, RUN_INDEX)}; it names {ours[0]}")
    gone = [r["run"] for r in registrations(args.work) if not os.path.isdir(r["run"]) and r["data_id"] == data_id]
    for run in gone:
        print(f"registered run {run} (the same data) is gone: if {run_dir} is its new place, "
              f"'data.sh forget {shlex.quote(run)}' drops the old registration")


def cmd_forget(args):
    """``data.sh forget DIR``: the registration of a run folder that no longer exists dropped from
    WORK/runs.index, so that its data no longer protects the data it named (prune then shows it)."""
    want = os.path.realpath(args.run_dir)
    if os.path.isdir(want):
        die(f"data.sh forget {args.run_dir}: the folder exists, so a run there still names its data; "
            f"forget is for a registered run folder that no longer exists")
    with _IndexLock(args.work):
        regs = registrations(args.work)
        hit = [r for r in regs if r["run"] in (want, args.run_dir)]
        if not hit:
            gone = [r["run"] for r in regs if not os.path.isdir(r["run"])]
            die(f"data.sh forget {args.run_dir}: not registered in {os.path.join(args.work, RUN_INDEX)} "
                f"(registered and gone: {', '.join(gone) if gone else 'none'})")
        _write_registrations(args.work, [r for r in regs if r not in hit])
    print(f"forgot registered run {hit[0]['run']} ({os.path.join(args.work, RUN_INDEX)}): the data it named "
          f"is kept only where another run or {LINK} names it ('data.sh prune' shows what it would remove)")


def references(work: str):
    """{run folder: (data path, data_id)} for every run.json / data.json under WORK (symlinks are
    not followed; WORK/data itself is not searched) and in every folder registered in
    WORK/runs.index that still exists."""
    refs = {}
    data_root = os.path.join(work, "data")
    for dirpath, dirnames, filenames in os.walk(work, followlinks=False):
        if os.path.abspath(dirpath) == os.path.abspath(work) and "data" in dirnames:
            dirnames.remove("data")
        if os.path.abspath(dirpath).startswith(os.path.abspath(data_root) + os.sep):
            continue
        if "run.json" in filenames or "data.json" in filenames:
            found = run_data(dirpath)
            if found:
                refs[os.path.realpath(dirpath)] = found[:2]
    for run in registered_runs(work):
        found = run_data(run) if os.path.isdir(run) else None
        if found:
            refs[os.path.realpath(run)] = found[:2]
    return refs


def gone_registrations(work: str):
    """The registrations whose run folder no longer exists (moved, renamed or removed)."""
    return [r for r in registrations(work) if not os.path.isdir(r["run"])]


def gone_runs(work: str):
    """The registered run folders that no longer exist."""
    return [r["run"] for r in gone_registrations(work)]


def _run_name(work: str, run: str) -> str:
    """A run as list/prune name it: relative to WORK when inside it, else its absolute path."""
    rel = os.path.relpath(run, os.path.realpath(work))
    return run if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def _size(folder: str) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(folder, followlinks=False):
        for name in filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


GONE = " (gone)"


def data_folders(work: str, forgetting=()):
    """[(name, folder, prepare.json or None, referencing runs)] for each folder in WORK/data,
    symlinks and *.tmp left out; ``data-bin`` counts as a reference, and so does a registered run
    that is gone (named ``RUN (gone)``; one of an older train.sh, whose data is unknown, names every
    folder) unless it is among ``forgetting``."""
    root = os.path.join(work, "data")
    if not os.path.isdir(root):
        return []
    refs = references(work)
    gone = [r for r in gone_registrations(work) if r["run"] not in forgetting]
    link = os.path.join(work, LINK)
    latest = os.path.realpath(link) if os.path.islink(link) else None
    out = []
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if name.endswith(".tmp") or os.path.islink(folder) or not os.path.isdir(folder):
            continue
        rec = read_prepare(folder)
        data_id = (rec or {}).get("data_id")
        by = sorted(_run_name(work, run) for run, (path, rid) in refs.items()
                    if _names_folder(path, rid, folder, data_id))
        by += [r["run"] + GONE for r in gone
               if not r["data_id"] or _names_folder(r["data"], r["data_id"], folder, data_id)]
        if latest and os.path.realpath(folder) == latest:
            by.insert(0, LINK)
        out.append((name, folder, rec, by))
    return out


def _human(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def prepare_again(rec: dict) -> str:
    """How to make a data folder again: the settings it was prepared with and the files it was given."""
    return f"{prepare_vars(rec.get('settings') or {})}; {inputs_summary(rec)}"


def _describe(name, folder, rec, by, size=None) -> str:
    if rec is None:
        return f"{name}  no prepare.json (not made by prepare.sh): left alone"
    tp = rec.get("train_pairs", {})
    cap = tp.get("cap")
    pairs = f"train pairs {tp.get('clean')} of {tp.get('raw')}"
    if cap:
        pairs += f" (cap {cap['max_src_words']} {cap['words_of']} source words: kept {cap['kept']}, dropped {cap['dropped']})"
    size = _size(folder) if size is None else size
    return (f"{name}  {settings_summary(rec.get('settings', {}))}  {pairs}  {_human(size)}  "
            f"{inputs_summary(rec)}  referenced by: {', '.join(by) if by else 'nothing'}")


def _gone_lines(work: str, forgetting=()):
    """One line per gone registration: what it keeps and how to say where the run lies now or that
    it was removed."""
    lines = []
    for r in gone_registrations(work):
        run, quoted = r["run"], shlex.quote(r["run"])
        if run in forgetting:
            continue
        keeps = (f"its data {r['data']} (data_id {r['data_id'][:ID_LEN]}) is kept" if r["data_id"]
                 else "registered by an older train.sh without its data, so every data folder is kept")
        lines.append(f"registered run {run}: gone (the folder no longer exists; {os.path.join(work, RUN_INDEX)}); "
                     f"{keeps}. Moved? 'data.sh register NEW_PLACE' (or train.sh with SAVE_DIR=NEW_PLACE) records "
                     f"where it lies now; removed? 'data.sh forget {quoted}' (or 'data.sh prune --yes --forget-gone') "
                     f"lets prune remove its data")
    return lines


def cmd_data_list(args):
    folders = data_folders(args.work)
    if not folders:
        print(f"{args.work}/data: no prepared data")
    for f in folders:
        print(_describe(*f))
    for line in _gone_lines(args.work):
        print(line)


def _why_unreferenced(work: str, rec: dict, n_runs: int) -> str:
    return (f"data_id {rec.get('data_id', '?')[:ID_LEN]} is named by none of the {n_runs} run record(s) "
            f"under {work} or registered in {os.path.join(work, RUN_INDEX)}, and {LINK} points elsewhere")


def cmd_data_prune(args):
    """The folders of WORK/data that no run record, no gone registration and not data-bin name:
    shown with their sizes and why (the default, as --dry-run), removed only with --yes. With
    --forget-gone, the gone registrations are forgotten first (with --yes; shown without)."""
    forgetting = tuple(gone_runs(args.work)) if args.forget_gone else ()
    for run in forgetting:
        if args.yes:
            cmd_forget(argparse.Namespace(work=args.work, run_dir=run))
        else:
            print(f"would forget registered run {run}: gone (the folder no longer exists)")
    doomed, total = [], 0
    for name, folder, rec, by in data_folders(args.work, () if args.yes else forgetting):
        if by or rec is None:
            print(f"kept {_describe(name, folder, rec, by)}")
            continue
        size = _size(folder)
        doomed.append((folder, rec, size))
        total += size
    for line in _gone_lines(args.work, forgetting):
        print(line)
    n_runs = len(references(args.work))
    for folder, rec, size in doomed:
        verb = "removed" if args.yes else "would remove"
        if args.yes:
            shutil.rmtree(folder)  # a real folder directly in WORK/data (symlinks were left out)
        print(f"{verb} {folder} ({_human(size)}; {settings_summary(rec.get('settings', {}))}; "
              f"{_why_unreferenced(args.work, rec, n_runs)})")
    again = " --forget-gone" if args.forget_gone else ""
    if args.yes:
        print(f"{len(doomed)} unreferenced data folder(s) removed ({_human(total)})")
    else:
        print(f"{len(doomed)} unreferenced data folder(s), {_human(total)}, would be removed; nothing was removed: "
              f"'data.sh prune --yes{again}' removes them")


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("data-place", help="move a finished data-bin to WORK/data/<id>, point WORK/data-bin at it")
    p.add_argument("--tmp", required=True); p.add_argument("--work", required=True)
    p.add_argument("--record", help="the binarise step's per-setting record being made (its .want): names the folder")
    p.set_defaults(fn=cmd_data_place)
    p = sub.add_parser("data-point", help="point WORK/data-bin at the data folder binarise made for these settings")
    p.add_argument("--work", required=True); p.add_argument("--record", required=True)
    p.add_argument("--set", action="append", metavar="KEY=VALUE"); p.set_defaults(fn=cmd_data_point)
    p = sub.add_parser("run-data", help="print the data folder a run was trained on")
    p.add_argument("--run-dir", required=True); p.add_argument("--work"); p.add_argument("--data", help="an explicit DATA")
    p.set_defaults(fn=cmd_run_data)
    p = sub.add_parser("data-list", help="the data folders of WORK/data and the runs that name them")
    p.add_argument("work"); p.set_defaults(fn=cmd_data_list)
    p = sub.add_parser("data-prune", help="show the folders of WORK/data no run record names (removed with --yes)")
    p.add_argument("work"); p.add_argument("--yes", action="store_true", help="remove them (without: only shown)")
    p.add_argument("--forget-gone", action="store_true",
                   help="forget the registered runs that are gone first (with --yes; without, only shown)")
    p.set_defaults(fn=cmd_data_prune)
    p = sub.add_parser("register-run", help="record a run folder in WORK/runs.index (list and prune see it)")
    p.add_argument("--work", required=True); p.add_argument("--run-dir", required=True)
    p.add_argument("--data", help="the data folder it trains on (its data_id is recorded beside it)")
    p.set_defaults(fn=cmd_register_run)
    p = sub.add_parser("data-register", help="register a run folder (a moved run's new place) in WORK/runs.index")
    p.add_argument("work"); p.add_argument("run_dir"); p.set_defaults(fn=cmd_register)
    p = sub.add_parser("data-forget", help="drop a gone run folder's registration from WORK/runs.index")
    p.add_argument("work"); p.add_argument("run_dir"); p.set_defaults(fn=cmd_forget)
