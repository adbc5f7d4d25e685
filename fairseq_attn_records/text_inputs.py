"""The one reader of the text files every score is computed from (references and
system outputs: detokenised text, one sentence per line).

Each problem is one line naming the file and what is allowed, before any scoring:

* a path that does not exist, or that is a directory;
* an empty file;
* bytes that are not UTF-8 (the line and byte offset of the first one);
* a hypothesis file whose line count differs from the reference's (:func:`check_aligned`).

Documented behaviour, not errors:

* CRLF line endings: the ``\\r`` before each ``\\n`` is part of the line ending, not of the
  sentence (scores equal those of the same file with LF endings). Lines are split on
  ``\\n`` only: a lone ``\\r`` or another Unicode separator inside a line stays in it, so
  the line count is the one ``wc -l`` prints (plus an unterminated last line).
* an empty line in a system output is an empty translation (it scores zero for that
  sentence); :func:`empty_lines` lists them so that the commands can say how many there are.
"""

import os
from typing import List, Sequence

TEXT_HINT = "give detokenised text, one sentence per line"


def read_text_lines(path: str, what: str = "text") -> List[str]:
    """The lines of ``path`` without their line endings (LF or CRLF).

    ``what`` names the file's role in the messages ("reference", "hypothesis", ...).
    Raises FileNotFoundError / ValueError with a one-line message naming the file.
    """
    if os.path.isdir(path):
        raise ValueError(f"{path}: is a directory; the {what} must be a file ({TEXT_HINT})")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file ({what}: {TEXT_HINT})")
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{path}: not UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start}, line {line}); "
                         f"convert the {what} to UTF-8, e.g. iconv -f latin1 -t utf-8") from None
    if text.startswith("\ufeff"):  # a byte-order mark is not part of the first sentence
        text = text[1:]
    if not text:
        raise ValueError(f"{path}: empty file ({what}: {TEXT_HINT})")
    lines = text.split("\n")
    if lines[-1] == "":  # the final newline ends the last line, it does not start a new one
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def check_aligned(ref_path: str, refs: Sequence[str], hyp_path: str, hyps: Sequence[str],
                  what: str = "translation") -> None:
    """A system output (or the test set's source: ``what="source sentence"``) must have one line
    per reference line."""
    if len(hyps) != len(refs):
        raise ValueError(f"{hyp_path}: {len(hyps)} lines but the reference {ref_path} has {len(refs)} "
                         f"(one {what} per reference line, in the same order)")


def empty_lines(lines: Sequence[str]) -> List[int]:
    """1-based numbers of the lines that are empty (or whitespace only)."""
    return [i for i, line in enumerate(lines, 1) if not line.strip()]


def describe_empty(path: str, lines: Sequence[str]) -> str:
    """'' or one line: how many empty translations ``path`` holds (scored as empty)."""
    empty = empty_lines(lines)
    if not empty:
        return ""
    shown = ", ".join(map(str, empty[:5])) + (", ..." if len(empty) > 5 else "")
    return (f"note: {path}: {len(empty)} empty line(s) of {len(lines)} (line {shown}), "
            f"scored as empty translations")
