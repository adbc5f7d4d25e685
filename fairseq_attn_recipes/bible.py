"""The Greek-English New Testament corpus of the ``bible-alignments`` package (Clear Bible; data
CC-BY 4.0): the SBLGNT Greek New Testament and the Berean Standard Bible (BSB) English, as token
files with verse ids. Real text, offline: the package is on the registry (install it with
``scripts/setup_env.sh``, into ``.venv/share/bible-alignments``; its code's dependencies are not
needed, only its data files are read).

Verse pairs: the Greek tokens of a verse (``SBLGNT.tsv``, token id ``nBBCCCVVVWWW``) joined by
spaces, and the English tokens whose ``source_verse`` is that verse (``nt_BSB.tsv``), each followed
by a space unless ``skip_space_after`` is ``y``. Verses present on one side only are left out
(7,936 pairs in version 0.4.2). The SBLGNT token files carry no punctuation; the BSB's do.

Split: by chapter, so that test and valid documents are whole and contiguous (the long-input
study joins consecutive verses of one chapter, :mod:`.concat`): every verse of chapter ``BBCCC``
(the first 5 digits of the verse id ``BBCCCVVV``) goes to test when ``sha256(chapter id) mod 100
< 12``, to valid when it is in ``12..16``, else to train (about 12 % / 5 % / 83 % of the 260
chapters). The split depends on nothing but the chapter id. (It was by verse before: a verse's
neighbours were then in other splits, and no test document was whole.) ``{split}.ids`` holds the
verse id of each line, ``{split}.docs`` its chapter (the document id of ``concat-test``).
"""

import base64
import csv
import hashlib
import os
import sys
from collections import OrderedDict
from typing import Dict, List, Tuple

from .fingerprints import file_digest
from .step_inputs import die

PACKAGE = "bible-alignments"
SOURCE_FILE = "data/sources/SBLGNT.tsv"
TARGET_FILE = "data/eng/targets/BSB/nt_BSB.tsv"
SPLITS = (("test", 0, 12), ("valid", 12, 17), ("train", 17, 100))
SPLIT_RULE = "by chapter: sha256(chapter id BBCCC) mod 100: test < 12 <= valid < 17 <= train"


# scripts/setup_env.sh installs the package here (pip install --target): outside site-packages, so
# pip does not check its code's dependencies (django, jupyterlab...: not needed to read its data,
# and reported as conflicts on every later pip install were it in site-packages)
DATA_HOME = os.path.join(sys.prefix, "share", PACKAGE)


def distribution():
    """The bible-alignments distribution: installed in this environment, or in DATA_HOME; a
    one-line error saying how to install it otherwise."""
    from importlib import metadata  # here: every recipe step imports this module
    try:
        return metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        found = list(metadata.distributions(name=PACKAGE, path=[DATA_HOME]))
        if found:
            return found[0]
    die(f"CORPUS=bible reads the {PACKAGE} package's data: bash scripts/setup_env.sh installs it "
        f"(pip install --no-deps --target {DATA_HOME} {PACKAGE}==0.4.2)")


REINSTALL = f"pip install --no-deps --force-reinstall --target {DATA_HOME} {PACKAGE}==0.4.2"


def installed_file(dist, rel: str) -> str:
    """The path of the package file ``rel``, checked against what pip recorded when it installed it
    (the distribution's RECORD: size and sha256), so that a file a killed install left half-copied, or
    one changed since, is never read as the corpus; else a one-line error saying how to reinstall."""
    path = str(dist.locate_file(rel))
    if not os.path.isfile(path):
        die(f"{PACKAGE} {dist.version}: {path} is missing (this version ships no {rel}); {REINSTALL}")
    entry = next((f for f in dist.files or () if f.as_posix() == rel), None)
    if entry is None or entry.hash is None or entry.hash.mode != "sha256":
        die(f"{PACKAGE} {dist.version}: its RECORD holds no sha256 of {rel}, so {path} cannot be checked; {REINSTALL}")
    got = file_digest(path)
    recorded = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4)).hex()
    if (entry.size is not None and got["bytes"] != entry.size) or got["sha256"] != recorded:
        die(f"{PACKAGE} {dist.version}: {path} is not the file pip installed (its size or sha256 differs from "
            f"the RECORD: a partial or changed install); {REINSTALL}")
    return path


def data_files() -> Tuple[str, str, str]:
    """(SBLGNT path, BSB NT path, package version), each checked (:func:`installed_file`), or a
    one-line error saying how to install."""
    dist = distribution()
    return installed_file(dist, SOURCE_FILE), installed_file(dist, TARGET_FILE), dist.version


def _rows(path: str):
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader)
        for row in reader:
            yield dict(zip(header, row + [""] * (len(header) - len(row))))


def greek_verses(path: str) -> "OrderedDict[str, str]":
    words: "OrderedDict[str, List[str]]" = OrderedDict()
    for row in _rows(path):
        words.setdefault(row["id"][1:9], []).append(row["text"])
    return OrderedDict((v, " ".join(w)) for v, w in words.items())


def english_verses(path: str) -> "OrderedDict[str, str]":
    text: "OrderedDict[str, str]" = OrderedDict()
    for row in _rows(path):
        sep = "" if row["skip_space_after"] == "y" else " "
        text[row["source_verse"]] = text.get(row["source_verse"], "") + row["text"] + sep
    return OrderedDict((v, " ".join(t.split())) for v, t in text.items())


def chapter_of(verse: str) -> str:
    """The document of a verse: book and chapter, the first 5 digits of ``BBCCCVVV``."""
    return verse[:5]


def split_of(verse: str) -> str:
    bucket = int(hashlib.sha256(chapter_of(verse).encode()).hexdigest(), 16) % 100
    return next(name for name, lo, hi in SPLITS if lo <= bucket < hi)


def verse_pairs() -> Tuple[Dict[str, List[Tuple[str, str, str]]], str]:
    """{split: [(verse id, greek, english)]} in canonical order, and the package version."""
    src_path, tgt_path, version = data_files()
    grc, eng = greek_verses(src_path), english_verses(tgt_path)
    out: Dict[str, List[Tuple[str, str, str]]] = {name: [] for name, _, _ in SPLITS}
    for verse, g in grc.items():
        e = eng.get(verse, "")
        if g.strip() and e.strip():
            out[split_of(verse)].append((verse, g, e))
    return out, version
