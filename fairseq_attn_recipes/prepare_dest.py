"""What prepare.sh may replace: an explicit ``DATA`` is replaced whole (``rm -rf DATA; mv DATA.tmp
DATA``), so ``check-data-dest`` allows only a folder that does not exist yet or one an earlier
prepare.sh of the same recipe wrote (its ``prepare.json``), and never WORK, a folder of WORK's
steps, a run folder, a WORK's data folder, or a folder holding any of them. Called before any
step: a refusal is one line naming DATA and what is allowed, and leaves nothing behind."""

import os
import shutil

from .databins import LINK, also_prepared_as, owning_work, read_prepare, references
from .step_inputs import die

#: the folders of WORK that prepare.sh and data.sh manage themselves: never a DATA, nor inside one
WORK_FOLDERS = ("raw", "tok", "bpe", ".done", "downloads", "data")
#: what marks a run folder (train.sh's records, fairseq's checkpoints) and a WORK (its step records)
RUN_FILES = ("run.json", "data.json", "checkpoint_last.pt")
WORK_MARKS = (".done", "runs.index", ".prepare.lock")
#: written by binarise into DATA.tmp and DATA.tmp.dict before anything else (removed after the move;
#: ``fingerprints.file_digest`` skips names ending in .tmp, so it is never part of a data_id)
PARTIAL_MARK = "made-by-prepare.tmp"


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _run_mark(folder: str, files) -> str:
    """The file that makes ``folder`` a run folder (or a WORK), else ''."""
    for name in RUN_FILES + WORK_MARKS:
        if name in files:
            return name
    return next((f for f in sorted(files) if f.startswith("checkpoint") and f.endswith(".pt")), "")


def _held_run(folder: str) -> str:
    """A run folder or WORK inside ``folder`` (``PATH (FILE)``), else ''."""
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        mark = _run_mark(dirpath, set(filenames) | set(dirnames))
        if mark:
            return f"{dirpath} ({mark})"
    return ""


def refusal(data: str, work: str, recipe: str, pair: str) -> str:
    """Why prepare.sh of ``recipe`` (language pair ``pair``, ``SRC-TGT``) must not replace ``data``,
    or '' when it may (a new folder, or this recipe's earlier output)."""
    d, w = os.path.realpath(data), os.path.realpath(work)
    if d == w:
        return f"is WORK (it holds the steps, the prepared data and the runs of WORK={work})"
    if _inside(w, d):
        return f"holds WORK={work}"
    for name in WORK_FOLDERS:
        if _inside(d, os.path.join(w, name)):
            where = "" if d == os.path.join(w, name) else "inside "
            return f"is {where}WORK's {name}/ ({os.path.join(work, name)}), which prepare.sh manages itself"
    if not os.path.lexists(data):
        return ""
    if not os.path.isdir(d):
        return "is a file, not a folder prepare.sh wrote"
    mark = _run_mark(d, set(os.listdir(d)))
    if mark:
        return f"is a run folder or a WORK (it holds {mark})"
    rec = read_prepare(d)
    if rec is None or not rec.get("data_id"):
        return "has no prepare.json: it is not a folder prepare.sh wrote"
    theirs = rec.get("recipe")
    settings = rec.get("settings") or {}
    their_pair = f"{settings.get('SRC')}-{settings.get('TGT')}"
    if theirs and theirs != recipe:
        return f"was written by the prepare.sh of {theirs} (its prepare.json), not of {recipe}"
    if not theirs and their_pair != pair:  # a record of before prepare.json named its recipe
        return f"holds {their_pair} data (its prepare.json), not {pair}: another recipe's output"
    owner = owning_work(d)
    if owner:
        return f"is a data folder of WORK={owner} ({LINK} or its runs may name it; data.sh prune removes it)"
    held = _held_run(d)
    if held:
        return f"holds the run folder or WORK {held}"
    return ""


def leftover_refusal(data: str) -> str:
    """Why ``DATA.tmp`` or ``DATA.tmp.dict`` must not be removed as binarise's leftover, or ''."""
    for path in (data + ".tmp", data + ".tmp.dict"):
        if not os.path.lexists(path):
            continue
        ours = os.path.isdir(path) and not os.path.islink(path) and (
            os.path.isfile(os.path.join(path, PARTIAL_MARK)) or not os.listdir(path))
        if not ours:
            return (f"{path} exists and prepare.sh did not make it (it has no {PARTIAL_MARK}): prepare.sh writes "
                    f"DATA.tmp and DATA.tmp.dict before it moves them to DATA, and removes what a killed run left "
                    f"there; rename or remove it, or give another DATA")
    return ""


def runs_on(data: str, work: str):
    """The run folders WORK knows of that were trained on the data folder ``data`` as it is now."""
    data_id = (read_prepare(data) or {}).get("data_id")
    where = os.path.realpath(data)
    return sorted(run for run, (path, run_id) in references(work).items()
                  if run_id == data_id and path and os.path.realpath(path) == where)


def cmd_data_replace(args):
    new_id = (read_prepare(args.tmp) or {}).get("data_id")
    if not new_id:
        die(f"{args.tmp} has no prepare.json: the data-bin was not recorded")
    if os.path.isdir(args.data) and (read_prepare(args.data) or {}).get("data_id") == new_id:
        also_prepared_as(args.data, read_prepare(args.tmp))  # other settings that make the same data
        shutil.rmtree(args.tmp)
        print(f"DATA={args.data}: the same data was prepared there before: kept")
        return
    trained = runs_on(args.data, args.work) if os.path.isdir(args.data) else []
    if trained:
        shutil.rmtree(args.tmp)
        die(f"DATA={args.data} holds the data {len(trained)} run(s) were trained on ({', '.join(trained[:3])}"
            f"{', ...' if len(trained) > 3 else ''}), and these settings make other data: nothing was replaced; give "
            f"another DATA, or no DATA (each prepared data then gets its own WORK/data/<id>); the steps are kept, "
            f"so the re-run only binarises")
    if os.path.islink(args.data) or os.path.isfile(args.data):
        os.remove(args.data)
    elif os.path.isdir(args.data):
        shutil.rmtree(args.data)
    os.replace(args.tmp, args.data)
    mark = os.path.join(args.data, PARTIAL_MARK)
    if os.path.exists(mark):
        os.remove(mark)
    print(f"DATA={args.data}: written")


def cmd_check_data_dest(args):
    left = leftover_refusal(args.data)
    if left:
        die(f"DATA={args.data}: {left}; nothing was changed")
    why = refusal(args.data, args.work, args.recipe, args.pair)
    if why:
        die(f"DATA={args.data} {why}: prepare.sh replaces DATA whole, so it takes only a new folder or one an "
            f"earlier prepare.sh of {args.recipe} wrote (its prepare.json), or no DATA (each prepared data then gets "
            f"its own WORK/data/<id>, named by WORK/{LINK}); nothing was changed")


def input_refusal(name: str, path: str, work: str) -> str:
    """Why the user's file ``path`` (the variable ``name``: a local corpus) must not be read where it
    lies, or '': inside a folder of WORK that prepare.sh empties and fills itself (its raw step deletes
    every file of WORK/raw before copying the corpora there)."""
    p, w = os.path.realpath(path), os.path.realpath(work)
    for folder in WORK_FOLDERS:
        if _inside(p, os.path.join(w, folder)):
            return (f"{name}={path} lies in WORK's {folder}/ ({os.path.join(work, folder)}), which prepare.sh empties "
                    f"and fills itself, so it would be deleted: move it out of WORK's "
                    f"{', '.join(f + '/' for f in WORK_FOLDERS)} and give its new path; nothing was changed")
    return ""


def cmd_check_local_inputs(args):
    for given in args.inputs:
        name, _, path = given.partition("=")
        why = input_refusal(name, path, args.work)
        if why:
            die(why)


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes check-data-dest``)."""
    p = sub.add_parser("check-local-inputs", help="refuse a local corpus file inside a folder of WORK that prepare.sh "
                       "empties and fills itself (one line)")
    p.add_argument("--work", required=True)
    p.add_argument("inputs", nargs="*", metavar="VAR=PATH", help="the local corpus files (TRAIN_SRC=...)")
    p.set_defaults(fn=cmd_check_local_inputs)
    p = sub.add_parser("check-data-dest", help="refuse an explicit DATA that prepare.sh did not write (one line)")
    p.add_argument("--data", required=True); p.add_argument("--work", required=True)
    p.add_argument("--recipe", required=True, help="the recipe's folder name (recorded in prepare.json)")
    p.add_argument("--pair", required=True, help="SRC-TGT (a record without its recipe is matched by its pair)")
    p.set_defaults(fn=cmd_check_data_dest)
    p = sub.add_parser("data-replace", help="put a finished explicit DATA in place, never over the data of runs")
    p.add_argument("--tmp", required=True, help="the finished data-bin (DATA.tmp)")
    p.add_argument("--data", required=True); p.add_argument("--work", required=True)
    p.set_defaults(fn=cmd_data_replace)
