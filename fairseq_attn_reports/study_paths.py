"""The paths a study's JSON tables name (``fairseq-attn-results --json``, the long-input study's
``lengths.json`` and ``train_concat.json``), written relative to the folder of the file itself, so
that a study folder copied or moved elsewhere, or exported into the repository
(:mod:`.study_bundle`), names no folder of the machine it ran on.

* The fields that hold paths are :data:`PATH_KEYS` (a string, a list of them or a mapping to
  them); an absolute path there is written as ``./...`` or ``../...`` relative to the file's
  folder (:func:`relative`), and the file says so in :data:`PATHS_KEY`. Other strings (a note, a
  system name, "the test file in order ...") are never touched.
* Read back with :func:`load_table`: every ``./`` or ``../`` string of those fields is joined to
  the file's folder (:func:`resolved`); an absolute path (a table written before this rule) stays
  as it is, so older tables read as before.
* What a table scored: :func:`write_table` records in :data:`SCORED_KEY` the sha256 of every file
  it names (outputs, references, sources; not the tables it names, which record their own), taken
  when the file is first named and carried through later writes of the same table (a section added
  by another step), so that an output rewritten after the table was made (evaluate.sh again, with
  another BEAM) is told from the one the table scored (:func:`changed_since_scored`).
"""

import json
import os
from typing import Any, List, Tuple

from fairseq_attn_records.output_files import write_json
from fairseq_attn_records.run_record import file_sha256

#: the fields of the study tables that name a file or folder
PATH_KEYS = frozenset({"ref", "src", "hyp", "hyps", "run_dir", "run_dirs", "data", "seed_hyps", "documents",
                       "info", "studies", "file"})
PATHS_KEY = "paths"
PATHS_NOTE = "relative to the folder of this file (./ and ../)"
#: ``[{"file", "sha256"}]``: every file the table names, as it was when the table scored it
SCORED_KEY = "scored_files"


def _is_relative(s: str) -> bool:
    return s.startswith("./") or s.startswith("../")


def _map_paths(obj: Any, fn, in_path_field: bool = False) -> Any:
    if isinstance(obj, dict):
        return {k: _map_paths(v, fn, in_path_field or k in PATH_KEYS) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_map_paths(v, fn, in_path_field) for v in obj]
    if isinstance(obj, str) and in_path_field:
        return fn(obj)
    return obj


def relative(obj: Any, root: str) -> Any:
    """A copy of ``obj`` with every absolute path of its path fields relative to ``root``."""
    root = os.path.abspath(root)

    def rel(s: str) -> str:
        if not os.path.isabs(s):
            return s
        r = os.path.relpath(s, root)
        return r if r.startswith("../") or r == ".." else "./" + r
    return _map_paths(obj, rel)


def resolved(obj: Any, root: str) -> Any:
    """A copy of ``obj`` with every ``./`` or ``../`` path of its path fields joined to ``root``."""
    root = os.path.abspath(root)
    return _map_paths(obj, lambda s: os.path.normpath(os.path.join(root, s)) if _is_relative(s) else s)


def path_strings(obj: Any) -> list:
    """Every string of ``obj``'s path fields, in order (duplicates kept)."""
    found: list = []
    _map_paths(obj, lambda s: found.append(s) or s)
    return found


def scored_files(table: dict) -> List[dict]:
    """:data:`SCORED_KEY` of ``table`` (its paths absolute): the sha256 it holds of a file it still
    names, else the file's sha256 now; JSON files (tables, records) and folders are not listed."""
    known = {e["file"]: e["sha256"] for e in table.get(SCORED_KEY) or []}
    out, seen = [], set()
    for path in path_strings({k: v for k, v in table.items() if k != SCORED_KEY}):
        if not os.path.isabs(path) or path in seen or path.endswith(".json") or not os.path.isfile(path):
            continue
        seen.add(path)
        out.append({"file": path, "sha256": known.get(path) or file_sha256(path)})
    return out


def changed_since_scored(table: dict) -> List[Tuple[str, str, str]]:
    """``(file, sha256 scored, sha256 now)`` of every file of ``table`` (paths absolute) that is not
    the one the table scored (a missing file: now ``"missing"``)."""
    changed = []
    for e in table.get(SCORED_KEY) or []:
        now = file_sha256(e["file"]) if os.path.isfile(e["file"]) else "missing"
        if now != e["sha256"]:
            changed.append((e["file"], e["sha256"], now))
    return changed


def write_table(path: str, table: dict) -> None:
    """Write ``table`` (its paths absolute, as the code holds them) to ``path``, its paths relative
    to the folder of ``path``, with the sha256 of the files it scored (:func:`scored_files`), whole
    (tmp, then rename)."""
    table = dict(table, **{SCORED_KEY: scored_files(table)})
    out = relative(table, os.path.dirname(os.path.abspath(path)))
    out[PATHS_KEY] = PATHS_NOTE
    write_json(path, out)


def load_table(path: str) -> dict:
    """A table written by :func:`write_table` (or before it, its paths absolute), its paths absolute."""
    with open(path, encoding="utf-8") as f:
        table = json.load(f)
    return resolved(table, os.path.dirname(os.path.abspath(path)))
