"""A study's finished runs carried to another machine, without their checkpoints
(docs/howto/table1.md, "Carry a study to another machine").

* ``study-pack DIR --to FILE.tar.xz [--yes]``: every finished run below the study folder DIR (a
  folder with a ``run.json`` and an evaluation's ``scores.json`` one level below it) and the study's
  settings (``settings.txt``, ``study_settings.json``), packed into one archive. Checkpoints
  (``*.pt``), TensorBoard's event files, locks and files written aside (``*.tmp``) stay behind.
  A run not evaluated yet, or one a process holds (any of its ``.*.lock`` files locked), is left
  out and named. The member ``carry.json`` holds the sha256 of every other member.
* ``study-unpack FILE.tar.xz --to DIR``: the archive checked whole first (every member against
  ``carry.json``; the settings against DIR's own, which must be the same or absent). Only then is
  anything written: each run DIR does not hold yet, written aside and renamed into place. A run DIR
  already holds is kept as it is and named. A run written aside by an unpack that was killed (its
  folder holds :data:`UNPACK_MARK`) is named, and removed only with ``--yes``; nothing else is removed.

The study's scripts then reuse each carried run (its ``scores.json`` exists) and train the rest.
A carried run cannot be evaluated again: its checkpoints stayed behind.
"""

import fcntl
import json
import os
import shutil
import tarfile
import tempfile
from typing import Dict, List, Tuple

from fairseq_attn_records.output_files import staged, write_text
from fairseq_attn_reports.study_bundle import json_bytes, sha256_bytes, tar_xz

from .step_inputs import die

MANIFEST = "carry.json"
#: the study folder's own files that say how its runs were made (paper.sh, lengths.sh)
SETTINGS_FILES = ("settings.txt", "study_settings.json")
RUN_RECORD = "run.json"
#: the first file an unpack writes into a run's folder aside (removed before the rename): a folder aside
#: holding it is a killed unpack's, safe to remove
UNPACK_MARK = ".study-unpack"


class CarryError(ValueError):
    """A pack or unpack refused; the message names the file and why."""


def _left_behind(rel_path: str) -> bool:
    """A run's file that does not travel: checkpoints, TensorBoard, locks, files written aside."""
    parts = rel_path.split("/")
    name = parts[-1]
    return (name.endswith(".pt") or "tensorboard" in parts[:-1] or (name.startswith(".") and name.endswith(".lock"))
            or any(p.endswith(".tmp") or p.endswith(".old") for p in parts))


def _held(run_dir: str) -> bool:
    """Whether a process holds one of the run's locks (train.sh's, the study's)."""
    for name in os.listdir(run_dir):
        if not (name.startswith(".") and name.endswith(".lock")):
            continue
        with open(os.path.join(run_dir, name)) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
    return False


def _evaluated(run_dir: str) -> bool:
    return any(os.path.isfile(os.path.join(run_dir, d, "scores.json")) for d in os.listdir(run_dir)
               if os.path.isdir(os.path.join(run_dir, d)) and not _left_behind(d))


def find_runs(study: str) -> Tuple[List[str], Dict[str, str]]:
    """(runs to pack, {run: why it is left out}), each relative to ``study`` with "/"."""
    packed, left = [], {}
    for top, dirs, files in os.walk(study):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(top, d)) and not _left_behind(d))
        if RUN_RECORD not in files or top == study:
            continue
        dirs[:] = []  # a run's own folders are its files, not other runs
        rel = os.path.relpath(top, study).replace(os.sep, "/")
        if _held(top):
            left[rel] = "a process holds it (training or evaluating)"
        elif not _evaluated(top):
            left[rel] = "not evaluated yet (no scores.json)"
        else:
            packed.append(rel)
    return sorted(packed), left


def _run_files(study: str, run: str) -> Dict[str, bytes]:
    out = {}
    root = os.path.join(study, *run.split("/"))
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(top, d)))
        for name in sorted(files):
            path = os.path.join(top, name)
            rel = os.path.relpath(path, study).replace(os.sep, "/")
            if os.path.islink(path) or _left_behind(rel[len(run) + 1:]):
                continue
            with open(path, "rb") as f:
                out[rel] = f.read()
    return out


def pack(study: str, archive: str, replace: bool = False) -> Dict:
    """Write ``archive``; returns its manifest (runs packed, runs left out and why)."""
    if not os.path.isdir(study):
        raise CarryError(f"{study}: no such study folder")
    settings = [n for n in SETTINGS_FILES if os.path.isfile(os.path.join(study, n))]
    if not settings:
        raise CarryError(f"{study}: not a study folder (it has neither {' nor '.join(SETTINGS_FILES)})")
    if not archive.endswith(".tar.xz"):
        raise CarryError(f"--to {archive}: give a file name ending in .tar.xz")
    if os.path.lexists(archive) and not replace:
        raise CarryError(f"--to {archive} exists: give --yes to replace it")
    if not os.path.isdir(os.path.dirname(os.path.abspath(archive))):
        raise CarryError(f"--to {archive}: its folder does not exist")
    runs, left = find_runs(study)
    members = {}
    for name in settings:
        with open(os.path.join(study, name), "rb") as f:
            members[name] = f.read()
    for run in runs:
        members.update(_run_files(study, run))
    manifest = {"format": 1, "study": os.path.realpath(study), "settings": settings, "runs": runs,
                "left_out": left, "files": {n: sha256_bytes(b) for n, b in sorted(members.items())}}
    members[MANIFEST] = json_bytes(manifest)
    with staged(archive) as tmp:
        with open(tmp, "wb") as f:
            f.write(tar_xz(members))
    return manifest


def read_archive(archive: str) -> Tuple[Dict, Dict[str, bytes]]:
    """(manifest, members) of a pack, every member checked against the manifest."""
    if not os.path.isfile(archive):
        raise CarryError(f"{archive}: no such file")
    members = {}
    try:
        with tarfile.open(archive, mode="r:xz") as tar:
            for info in tar.getmembers():
                name = info.name
                if not info.isfile() or os.path.isabs(name) or ".." in name.split("/"):
                    raise CarryError(f"{archive}: member {name!r} is not a plain file inside the study folder")
                members[name] = tar.extractfile(info).read()
    except (tarfile.TarError, EOFError, OSError) as e:
        raise CarryError(f"{archive}: not a readable .tar.xz ({e})") from None
    if MANIFEST not in members:
        raise CarryError(f"{archive}: no {MANIFEST} in it: not made by study-pack")
    manifest = json.loads(members.pop(MANIFEST))
    want = manifest.get("files", {})
    for name in sorted(set(members) | set(want)):
        if name not in want:
            raise CarryError(f"{archive}: {name} is in the archive, not in its {MANIFEST}")
        if name not in members:
            raise CarryError(f"{archive}: {name} is in its {MANIFEST}, not in the archive")
        if sha256_bytes(members[name]) != want[name]:
            raise CarryError(f"{archive}: {name} differs from the sha256 in its {MANIFEST} (the file was changed)")
    return manifest, members


def _killed_unpacks(target: str) -> List[str]:
    """The folders a killed unpack left aside for the run folder ``target`` (named as :func:`unpack` names
    them, holding :data:`UNPACK_MARK`)."""
    parent, base = os.path.split(target)
    if not os.path.isdir(parent):
        return []
    return sorted(os.path.join(parent, n) for n in os.listdir(parent)
                  if n.startswith(f".{base}.") and n.endswith(".tmp")
                  and os.path.isfile(os.path.join(parent, n, UNPACK_MARK)))


def unpack(archive: str, study: str, remove_killed: bool = False) -> Tuple[List[str], List[str], List[str]]:
    """(runs written, runs kept as they were, killed unpacks' folders found: removed with ``remove_killed``)
    into ``study``; refused whole before any write."""
    manifest, members = read_archive(archive)
    for name in manifest["settings"]:
        mine = os.path.join(study, name)
        if os.path.isfile(mine):
            with open(mine, "rb") as f:
                if f.read() != members[name]:
                    raise CarryError(f"{mine} holds other settings than {archive}'s {name}: unpack into another "
                                     f"folder (the runs were made with those)")
    written, kept, found = [], [], []
    os.makedirs(study, exist_ok=True)
    for name in manifest["settings"]:
        if not os.path.isfile(os.path.join(study, name)):
            write_text(os.path.join(study, name), members[name].decode("utf-8"))
    for run in manifest["runs"]:
        target = os.path.join(study, *run.split("/"))
        for aside in _killed_unpacks(target):
            if remove_killed:
                shutil.rmtree(aside)
            found.append(aside)
        if os.path.lexists(target):
            kept.append(run)
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=os.path.dirname(target))
        try:
            write_text(os.path.join(tmp, UNPACK_MARK), f"{archive}\n")
            for name, data in members.items():
                if name.startswith(run + "/"):
                    dest = os.path.join(tmp, *name[len(run) + 1:].split("/"))
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    with open(dest, "wb") as f:
                        f.write(data)
            os.remove(os.path.join(tmp, UNPACK_MARK))
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        written.append(run)
    return written, kept, found


def cmd_study_pack(args):
    try:
        manifest = pack(args.study, args.to, replace=args.yes)
    except (CarryError, OSError) as e:
        die(str(e))
    print(f"{args.to}: {len(manifest['runs'])} finished runs of {args.study}, {len(manifest['files'])} files "
          f"(no checkpoints)")
    for run, why in sorted(manifest["left_out"].items()):
        print(f"left out: {run}: {why}")


def cmd_study_unpack(args):
    try:
        written, kept, found = unpack(args.archive, args.to, remove_killed=args.yes)
    except (CarryError, OSError, ValueError) as e:
        die(str(e))
    for aside in found:
        print(f"removed: {aside}: a run half written by a killed study-unpack" if args.yes else
              f"left: {aside}: a run half written by a killed study-unpack (give --yes to remove it)")
    print(f"{args.to}: {len(written)} runs unpacked from {args.archive}")
    for run in kept:
        print(f"kept: {run}: {args.to} holds it already (left as it is)")


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("study-pack", help="pack a study's finished runs, without checkpoints, to carry them to "
                       "another machine")
    p.add_argument("study", help="the study folder (WORK/table1_converge4, a figure2 or lengths folder)")
    p.add_argument("--to", required=True, help="the archive to write (.tar.xz)")
    p.add_argument("--yes", action="store_true", help="replace an archive already there")
    p.set_defaults(fn=cmd_study_pack)
    p = sub.add_parser("study-unpack", help="unpack a study-pack archive into a study folder; runs it holds are kept")
    p.add_argument("archive", help="the archive study-pack wrote")
    p.add_argument("--to", required=True, help="the study folder (the same settings, or a new folder)")
    p.add_argument("--yes", action="store_true", help="remove the runs a killed study-unpack left half written "
                   "(hidden folders holding its mark; named without --yes)")
    p.set_defaults(fn=cmd_study_unpack)
