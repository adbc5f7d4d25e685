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
"""

import json
import os
from typing import Any

from fairseq_attn_records.output_files import write_json

#: the fields of the study tables that name a file or folder
PATH_KEYS = frozenset({"ref", "src", "hyp", "hyps", "run_dir", "run_dirs", "data", "seed_hyps", "documents",
                       "info", "studies"})
PATHS_KEY = "paths"
PATHS_NOTE = "relative to the folder of this file (./ and ../)"


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


def write_table(path: str, table: dict) -> None:
    """Write ``table`` (its paths absolute, as the code holds them) to ``path``, its paths relative
    to the folder of ``path``, whole (tmp, then rename)."""
    out = relative(table, os.path.dirname(os.path.abspath(path)))
    out[PATHS_KEY] = PATHS_NOTE
    write_json(path, out)


def load_table(path: str) -> dict:
    """A table written by :func:`write_table` (or before it, its paths absolute), its paths absolute."""
    with open(path, encoding="utf-8") as f:
        table = json.load(f)
    return resolved(table, os.path.dirname(os.path.abspath(path)))
