"""The one way the distribution writes a file: aside, then renamed over the final name.

Every output (a run record, a results table, a figure, a corpus, an averaged checkpoint) is
written to ``PATH.tmp`` in the same folder and moved to ``PATH`` with ``os.replace`` only when
complete, so a stopped or failed step leaves the old file or none, never a half-written one that
a later step would trust; a write that fails removes its temporary file. ``*.tmp`` names are what
the fingerprints and the data-bin clean-up leave out. A folder written aside moves into place
with :func:`replace_folder`. Plain Python, no torch.
"""

import contextlib
import json
import os
import shutil
from typing import Iterable, Iterator, Optional

TMP = ".tmp"


def check_output_paths(*paths: Optional[str]) -> None:
    """Each output file's folder must exist before any long work starts."""
    for path in paths:
        if path is None:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"{path}: folder {folder} does not exist (create it first)")


@contextlib.contextmanager
def staged(path: str, suffix: str = "") -> Iterator[str]:
    """The temporary name a writer that takes a file name writes (``PATH.tmp`` + ``suffix``:
    ``.png`` where the writer reads the format off the name); renamed to ``path`` when the
    block ends without an error, removed otherwise."""
    tmp = path + TMP + suffix
    try:
        yield tmp
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    os.replace(tmp, path)


@contextlib.contextmanager
def replacing(path: str, mode: str = "w"):
    """An open file (text: UTF-8) on ``PATH.tmp``, renamed to ``path`` when the block ends
    without an error."""
    with staged(path) as tmp:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f


def write_text(path: str, text: str) -> None:
    with replacing(path) as f:
        f.write(text)


def write_lines(path: str, lines: Iterable[str]) -> None:
    """Each line followed by a newline."""
    with replacing(path) as f:
        for line in lines:
            f.write(line + "\n")


def write_json(path: str, obj, indent: Optional[int] = 2, sort_keys: bool = False, end: str = "") -> None:
    with replacing(path) as f:
        json.dump(obj, f, indent=indent, sort_keys=sort_keys)
        f.write(end)


def replace_folder(staged_folder: str, final: str) -> None:
    """Move a folder written aside to ``final`` in one rename; an older ``final`` is moved to
    ``final.old`` first and deleted after, so a stop in between leaves no ``final`` (missing
    outputs) or the new one, never a mix."""
    old = final.rstrip("/") + ".old"
    if os.path.lexists(old):
        shutil.rmtree(old)
    if os.path.lexists(final):
        os.replace(final, old)
    os.replace(staged_folder, final)
    if os.path.lexists(old):
        shutil.rmtree(old)
