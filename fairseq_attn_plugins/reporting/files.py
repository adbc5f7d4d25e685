"""Output files of the reporting commands: checked before long work starts, written
whole (``*.tmp`` then rename) so that a half-written file is never read later."""

import json
import os
from typing import Optional


def check_output_paths(*paths: Optional[str]) -> None:
    """Each output file's folder must exist before any long work starts."""
    for path in paths:
        if path is None:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"{path}: folder {folder} does not exist (create it first)")


def write_text_atomic(text: str, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json_atomic(obj, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)
