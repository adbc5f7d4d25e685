"""The generated reference pages of docs/reference/: the recipe variables (from :mod:`.variables`)
and every command's ``--help`` (from the commands' own parsers).

``python -m fairseq_attn_recipes.reference_docs docs/reference`` writes them;
``--check`` exits 1 naming each page that differs from what the code gives. A test
(tests/test_reference_docs.py) keeps the committed pages equal to the generated ones.
"""

import contextlib
import functools
import importlib
import io
import os
import re
import sys
from typing import Callable, Dict, List, Tuple

from fairseq_attn_records.command_line import Parser

from . import variables

#: every console command of pyproject.toml and the function it runs (a test holds the two the same)
COMMANDS: Tuple[Tuple[str, str], ...] = (
    ("fairseq-attn-demo", "fairseq_attn_recipes.demo:main"),
    ("fairseq-attn-significance", "fairseq_attn_reports.cli.significance:main"),
    ("fairseq-attn-results", "fairseq_attn_reports.cli.results:main"),
    ("fairseq-attn-bench", "fairseq_attn_plugins.cli.bench:main"),
    ("fairseq-attn-plot", "fairseq_attn_reports.cli.plot:main"),
    ("fairseq-attn-paper", "fairseq_attn_reports.cli.paper:main"),
    ("fairseq-attn-export", "fairseq_attn_plugins.cli.export:main"),
    ("fairseq-attn-pieces", "fairseq_attn_plugins.cli.pieces:main"),
    ("fairseq-attn-align", "fairseq_attn_reports.cli.align:main"),
)
#: the recipes' steps, documented as one more command
STEPS_COMMAND = ("python -m fairseq_attn_recipes", "fairseq_attn_recipes.__main__:main")
HELP_WIDTH = "100"  # argparse wraps at $COLUMNS: fixed, so the page does not depend on the terminal


def entry(target: str) -> Callable:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def help_text(name: str, target: str, argv: List[str]) -> str:
    """What ``name ARGV --help`` prints (the command's own parser, run in this process)."""
    out, saved = io.StringIO(), (os.environ.get("COLUMNS"), sys.argv[0])
    os.environ["COLUMNS"], sys.argv[0] = HELP_WIDTH, name
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            entry(target)([*argv, "--help"])
    finally:
        if saved[0] is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved[0]
        sys.argv[0] = saved[1]
    return out.getvalue().rstrip() + "\n"


def subcommands(text: str) -> List[str]:
    """The sub-commands a help lists as its positional argument (a line ``  {a,b,c}``), in order."""
    found = re.search(r"^  \{([a-z0-9,-]+)\}$", text, re.M)
    return found.group(1).split(",") if found else []


@functools.lru_cache(maxsize=1)
def command_helps() -> Dict[str, str]:
    """``command [sub-command]`` -> its help, for every console command and the recipes' steps (made once
    per process: the parsers do not change while it runs)."""
    helps = {}
    for name, target in COMMANDS + (STEPS_COMMAND,):
        text = helps[name] = help_text(name, target, [])
        for sub in subcommands(text):
            helps[f"{name} {sub}"] = help_text(name, target, [sub])
    return helps


def anchor_of(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def cli_page() -> str:
    helps = dict(command_helps())
    lines = [
        "# Command reference", "",
        "Every command's `--help`, generated from its parser.",
        "Regenerate with `python -m fairseq_attn_recipes.reference_docs docs/reference`.",
        "A test (`tests/test_reference_docs.py`) keeps this page equal to the code.", "",
        "| command |", "|---|",
    ]
    lines += [f"| [`{name}`](#{anchor_of(name)}) |" for name in helps]
    for name, text in helps.items():
        lines += ["", f"## {name}", "", "```text", text.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def table(header: Tuple[str, str], rows: Dict[str, str]) -> List[str]:
    return [f"| {header[0]} | {header[1]} |", "|---|---|"] + [f"| `{k}` | {v} |" for k, v in rows.items()]


def variables_page() -> str:
    lines = [
        "# Recipe variables", "",
        "The recipes' settings are environment variables (`ARCH=... bash recipes/wmt14_en_de/train.sh`).",
        "Every script checks the variables it reads against this table before it does anything.",
        "A value that is not allowed is one line naming the variable, its value and what is allowed (exit status 1).",
        "An empty value is unset: the script uses its default.",
        "This page is generated from `fairseq_attn_recipes/variables.py`.",
        "Regenerate it with `python -m fairseq_attn_recipes.reference_docs docs/reference`.", "",
        "## Checked values", "",
        variables.markdown(), "",
        "## Checked where they are used", "",
        "These variables need more than their value to be checked (the registry, another variable, a file).",
        "Each is checked in one place:", "",
        *table(("variable", "checked by"), variables.CHECKED_IN_PLACE), "",
        "## Paths, addresses and names", "",
        "These are used as given.",
        "A wrong one is refused where it is used, naming the variable:", "",
        *table(("variable", "what it is"), variables.FREE),
    ]
    return "\n".join(lines) + "\n"


PAGES = {"variables.md": variables_page, "cli.md": cli_page}


def main(argv=None) -> int:
    ap = Parser(prog="python -m fairseq_attn_recipes.reference_docs", description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="the folder of the reference pages (docs/reference)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each page that differs")
    args = ap.parse_args(argv)
    differ = []
    for name, make in PAGES.items():
        path, text = os.path.join(args.folder, name), make()
        if args.check:
            old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
            if old != text:
                differ.append(path)
        else:
            os.makedirs(args.folder, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    for path in differ:
        print(f"error: {path} differs from the code; run python -m fairseq_attn_recipes.reference_docs "
              f"{args.folder}", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
