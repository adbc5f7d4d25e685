"""A recipe step's inputs and arguments: whole files read, lines counted, ``KEY=VALUE`` and
``IN OUT`` pairs parsed, and the one-line error (exit 1: a refused input; argparse's usage errors
are 2) naming the file or argument. Outputs
are written by :mod:`fairseq_attn_records.output_files` (aside, then renamed)."""

import os
import sys


def die(msg: str, code: int = 1):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


def read_lines(path: str):
    if not os.path.isfile(path):
        die(f"{path}: no such file")
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.rstrip("\r\n") for line in f]


def key_values(items):
    out = {}
    for item in items or ():
        k, sep, v = item.partition("=")
        if not sep:
            die(f"expected KEY=VALUE, got {item!r}")
        out[k] = v
    return out


def count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))


def pairs(files):
    if len(files) % 2:
        die("give INPUT OUTPUT pairs")
    return list(zip(files[::2], files[1::2]))
