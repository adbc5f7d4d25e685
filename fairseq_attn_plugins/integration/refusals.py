"""The plugin's refusals read as one line in fairseq's own commands.

fairseq-train, -generate, -interactive and -validate (with ``--user-dir``) have no handler for
the plugin's errors, so a refused flag or checkpoint came out as a 20-line traceback through
fairseq's internals with the reason on its last line, and a mistyped flag as fairseq's 190-line
usage. When the running program is one of fairseq's commands or one of this distribution's
(:func:`running_command`), importing the plugin makes

* an uncaught error of the plugin's own kinds (:class:`PieceConfigError`: a flag, override or
  piece set refused; a corrupt or unsafe checkpoint) print ``error: MESSAGE`` alone (exit
  status 1, Python's for an uncaught error; any other exception keeps its traceback);
* in the programs parsing fairseq's command line (:func:`fairseq_parser_command`), an argparse
  error print one line without the usage, and an unknown flag the nearest known one
  (``--csan-windw``: ``did you mean --csan-window?``) and where the model's flags are listed
  (``fairseq-attn-pieces --arch A``); a model flag given to a command that builds the model from
  a checkpoint (``fairseq-generate --attn-flex-compile none``) the ``--model-overrides`` that sets
  it; exit status 2 as argparse's.

Any other program importing the package (a script, a notebook, pytest) keeps its interpreter as
it was: ``sys.excepthook`` and argparse are left alone and the exceptions propagate with their
tracebacks. Python code calling the plugin always gets the exception itself. The recipes' training
step (``python -m fairseq_attn_recipes.train``) catches the refusals itself: one line, exit status 1
as every refused input of the product (usage errors: 2).
"""

import argparse
import difflib
import os
import sys

from fairseq_attn_records.fairseq_argv import arch_of

# fairseq's console commands and ours all start with "fairseq-"; run by module, the programs of
# fairseq (fairseq_cli.generate...) and of this distribution
COMMAND_PREFIX = "fairseq-"
MODULE_PREFIXES = ("fairseq_cli.", "fairseq_attn_recipes", "fairseq_attn_plugins", "fairseq_attn_reports")


def refusal_kinds():
    from fairseq_attn_core.settings import PieceConfigError
    from ..checkpoint_safety import CorruptCheckpointError, UnsafeCheckpointError

    return PieceConfigError, CorruptCheckpointError, UnsafeCheckpointError


OWN_PREFIX = "fairseq-attn-"  # this distribution's console commands
#: the modules of this distribution's console commands (pyproject.toml's scripts), run with ``python -m``,
#: and of the recipes' steps (``python -m fairseq_attn_recipes STEP``; not the training step's)
OWN_COMMAND_MODULES = ("fairseq_attn_reports.cli.", "fairseq_attn_plugins.cli.", "fairseq_attn_recipes.demo",
                       "fairseq_attn_recipes.__main__")


def program(argv0=None, main_module=None):
    """The running program's name (``sys.argv[0]``'s basename) and the module run with ``python
    -m`` ("" if none); either given (the tests)."""
    argv0 = (sys.argv[0] if sys.argv else "") if argv0 is None else argv0
    if main_module is None:
        main = sys.modules.get("__main__")
        spec = main.__spec__ if main is not None else None
        main_module = spec.name if spec is not None else ""
    return os.path.basename(argv0), main_module


def running_command(argv0=None, main_module=None) -> bool:
    """Whether the running program is a fairseq command or one of ours: a console script named
    ``fairseq-*``, or a module of fairseq_cli / this distribution run with ``python -m``."""
    name, module = program(argv0, main_module)
    return name.startswith(COMMAND_PREFIX) or module.startswith(MODULE_PREFIXES)


def own_command(argv0=None, main_module=None) -> bool:
    """Whether the running program is one of this distribution's console commands
    (``fairseq-attn-*``, or its module run with ``python -m``) or a recipe step: programs whose
    output is their own, not fairseq's logs (fairseq-train's are the training step's output)."""
    name, module = program(argv0, main_module)
    return name.startswith(OWN_PREFIX) or module.startswith(OWN_COMMAND_MODULES)


def fairseq_parser_command(argv0=None, main_module=None) -> bool:
    """Whether the running program parses fairseq's command line: fairseq's console commands
    (``fairseq-train``..., not ours, ``fairseq-attn-*``, which print their own errors), its
    modules, and the recipes' training step."""
    name, module = program(argv0, main_module)
    return ((name.startswith(COMMAND_PREFIX) and not name.startswith(OWN_PREFIX))
            or module.startswith("fairseq_cli.") or module == "fairseq_attn_recipes.train")


def excepthook(kind, value, tb, previous=None):
    """A refusal of the plugin as ``error: MESSAGE``; anything else to ``previous`` (Python's)."""
    if isinstance(value, refusal_kinds()):
        sys.stderr.write(f"error: {value}\n")
        sys.stderr.flush()
        return
    (previous or sys.__excepthook__)(kind, value, tb)


def nearest_flag(unknown: str, known) -> str:
    """The known option string closest to ``unknown`` (``--csan-windw`` -> ``--csan-window``), or ''."""
    flag = unknown.split("=", 1)[0]
    close = difflib.get_close_matches(flag, [k for k in known if k.startswith("--")], n=1, cutoff=0.6)
    return close[0] if close else ""


def where_flags_are_listed(argv) -> str:
    """Where the model's flags are listed: ``fairseq-train --help`` shows no model or piece flag
    (fairseq 0.12 adds them only once the architecture is parsed), ``fairseq-attn-pieces --arch A``
    lists them with their values."""
    arch = arch_of(argv)
    if arch:
        return f"fairseq-attn-pieces --arch {arch} lists its flags"
    return "fairseq-attn-pieces --arch ARCH lists an architecture's flags"


def _flag_value(flag: str, argv):
    """The value given to ``flag`` on ``argv`` as a Python literal's value (True for none)."""
    if "=" in flag:
        text = flag.split("=", 1)[1]
    else:
        i = argv.index(flag) if flag in argv else -1
        text = argv[i + 1] if 0 <= i < len(argv) - 1 and not argv[i + 1].startswith("--") else None
    if text is None:
        return True
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def model_override(flag: str, argv) -> str:
    """For a model flag of the plugin given to a command that builds the model from a checkpoint
    (fairseq-generate, -interactive, -validate: their parser has no model flag), the route that
    sets it: ``--model-overrides "{'attn_flex_compile': 'none'}"``; '' for any other flag."""
    from fairseq_attn_core.flags import piece_flags
    from .model_overrides import SHARED_FLAGS

    dest = flag.split("=", 1)[0].lstrip("-").replace("-", "_")
    if dest not in set(piece_flags()) | set(SHARED_FLAGS):
        return ""
    return f"--model-overrides \"{{{dest!r}: {_flag_value(flag, argv)!r}}}\""


def parser_error(parser: argparse.ArgumentParser, message: str, argv=None):
    """argparse's error without the usage (fairseq's runs to 190 lines): one line, the nearest
    known flag of each unknown one, and where the model's flags are listed
    (:func:`where_flags_are_listed`; ``argv``: the command line, default ``sys.argv``); exit
    status 2 as argparse's."""
    argv = sys.argv[1:] if argv is None else argv
    hint = ""
    prefix = "unrecognized arguments: "
    if message.startswith(prefix):
        flags = [a for a in message[len(prefix):].split() if a.startswith("-")]
        hints = []
        for f in flags:
            override = "" if arch_of(argv) else model_override(f, argv)
            near = nearest_flag(f, parser._option_string_actions)
            if override:
                hints.append(f"{f.split('=', 1)[0]} is a model flag: {parser.prog} takes it as {override}")
            elif near:
                hints.append(f"did you mean {near} (for {f})?" if len(flags) > 1 else f"did you mean {near}?")
        hint = "; ".join(hints)
    listed = where_flags_are_listed(argv)
    parser.exit(2, f"error: {message}" + (f" ({hint})" if hint else "") + f" ({listed})\n")

