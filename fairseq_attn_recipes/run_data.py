"""The data a run was trained on, as its records say (run.json's ``data``, else train.sh's
data.json): read by the data folders' bookkeeping (:mod:`.databins`) and by check-data
(:mod:`.fingerprints`), which refuses a run of other data."""

import json
import os

#: the characters of a data_id that name its folder, WORK/data/<id>
ID_LEN = 12


def load_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def run_data(run_dir: str):
    """(path, data_id, settings) of the data a run was trained on: run.json's ``data``, else
    data.json; None when neither records it."""
    rec = load_json(os.path.join(run_dir, "run.json"))
    d = (rec or {}).get("data") if isinstance(rec, dict) else None
    if isinstance(d, dict) and d.get("data_id"):
        return d.get("path"), d["data_id"], d.get("settings") or {}
    d = load_json(os.path.join(run_dir, "data.json"))
    if isinstance(d, dict) and d.get("data_id"):
        return d.get("data"), d["data_id"], d.get("settings") or {}
    return None


def read_prepare(folder: str):
    """prepare.json of a data folder, or None when it has none (or an unreadable one)."""
    return load_json(os.path.join(folder, "prepare.json"))


def folder_holding(candidates, data_id: str):
    """The first existing folder of ``candidates`` whose prepare.json records ``data_id``, or None
    (a run's data is looked for in the WORK at hand, ``WORK/data/<id>``, before where it was trained:
    a WORK copied or moved with its runs holds the data they were trained on)."""
    for c in candidates:
        if c and os.path.isdir(c) and (read_prepare(c) or {}).get("data_id") == data_id:
            return c
    return None
