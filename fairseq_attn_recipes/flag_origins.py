"""fairseq-train's argument errors named by the recipe variable that gave the flag.

train.sh builds fairseq-train's command line from its variables; MODEL_ARGS and EXTRA_ARGS are
passed as they are, and only fairseq-train's parser (with the architecture's flags, which it adds
once the architecture is parsed) knows their flags. train.sh hands their text to the training step
in :data:`ENV` (``VAR=VALUE`` lines); an argument error of that parse is then one line naming the
variable, the flag, and the nearest flags of this architecture's fairseq-train
(``EXTRA_ARGS='--bogus-flag 1': fairseq-train with ARCH=... has no flag --bogus-flag ...``), not
fairseq's flag name alone. The same for PREPROCESS_ARGS and GEN_ARGS in fairseq-preprocess and
fairseq-generate (:mod:`.fairseq_command`). A flag no variable holds keeps the plugin's own one-line error
(:func:`fairseq_attn_plugins.integration.refusals.parser_error`).
"""

import argparse
import contextlib
import difflib
import os
import re
import shlex
import sys
from typing import Dict, List, Optional

from fairseq_attn_records.fairseq_argv import arch_of

ENV = "RECIPE_FLAG_VARIABLES"  # VAR=VALUE lines: the recipe variables whose flags are on the command line


class ArgumentError(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser, self.message = parser, message


@contextlib.contextmanager
def argument_errors_raised():
    """argparse's errors raised as :class:`ArgumentError` (with the parser, whose flags are the
    architecture's) instead of printed, while the block runs."""
    original = argparse.ArgumentParser.error

    def error(parser, message):
        raise ArgumentError(parser, message)

    argparse.ArgumentParser.error = error
    try:
        yield
    finally:
        argparse.ArgumentParser.error = original


def sources(environ=None) -> Dict[str, List[str]]:
    """The recipe variables of :data:`ENV` and the words of each."""
    text = (os.environ if environ is None else environ).get(ENV, "")
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and value.strip():
            out[name] = value.split()
    return out


def flags_named(message: str) -> List[str]:
    """The flags an argparse error is about: each unrecognised one, or the one whose value it refuses."""
    prefix = "unrecognized arguments: "
    if message.startswith(prefix):
        return [w for w in message[len(prefix):].split() if w.startswith("-")]
    m = re.match(r"argument ([^ :]+)", message)
    return m.group(1).split("/") if m else []


def near_flags(flag: str, known, n: int = 3) -> List[str]:
    """The known long flags whose names (without the dashes) are nearest ``flag``'s."""
    names = sorted({k[2:] for k in known if k.startswith("--")})
    wanted = flag.split("=", 1)[0].lstrip("-")
    return ["--" + k for k in difflib.get_close_matches(wanted, names, n=n, cutoff=0.75)]


def explain(parser: argparse.ArgumentParser, message: str, argv, given: Dict[str, List[str]],
            tool: str = "fairseq-train") -> Optional[str]:
    """The one-line error naming the variable that gave each flag the error is about (each unknown
    flag with the nearest known ones of ``tool``), or None when no variable gave them."""
    def variable_of(flag):
        name = flag.split("=", 1)[0]
        return next((v for v, words in given.items() if any(w.split("=", 1)[0] == name for w in words)), None)

    flags = [(f.split("=", 1)[0], variable_of(f)) for f in flags_named(message)]
    if not flags or any(var is None for _, var in flags):
        return None
    arch = arch_of(argv) if tool == "fairseq-train" else ""
    if tool != "fairseq-train":
        listed = f"{tool} --help lists its flags"
    else:
        listed = (f"fairseq-attn-pieces --arch {arch} lists the model's flags" if arch else
                  "fairseq-attn-pieces --arch ARCH lists a model's flags") + ", fairseq-train --help the others"
    if not message.startswith("unrecognized arguments: "):
        var = flags[0][1]
        return f"{var}={shlex.quote(' '.join(given[var]))}: {message} ({listed})"
    parts = []
    for var in dict.fromkeys(var for _, var in flags):  # each variable once, in the order of its flags
        unknown = []
        for name, of in flags:
            if of == var:
                near = near_flags(name, parser._option_string_actions)
                unknown.append(f"{name} ({'did you mean ' + ' or '.join(near) + '?' if near else 'no flag is near it'})")
        parts.append(f"{var}={shlex.quote(' '.join(given[var]))}: {tool}{f' with ARCH={arch}' if arch else ''} "
                     f"has no flag {' nor '.join(unknown)}")
    return "; ".join(parts) + f" ({listed})"


def report(error: ArgumentError, argv, environ=None, tool: str = "fairseq-train") -> int:
    """Print the error (named by its variable where one gave the flag; else the plugin's one line)
    and return argparse's exit status, 2."""
    line = explain(error.parser, error.message, argv, sources(environ), tool)
    if line is None:
        from fairseq_attn_plugins.integration.refusals import parser_error
        try:
            parser_error(error.parser, error.message, argv)
        except SystemExit as e:
            return e.code if isinstance(e.code, int) else 2
        return 2
    print(f"error: {line}", file=sys.stderr)
    return 2
