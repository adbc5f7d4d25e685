"""The argument parser of this distribution's commands: argparse's, refusing a single-valued option
given twice.

argparse keeps the last value of an option given twice (``--speed a.json --speed b.json`` reads
b.json alone). A user who repeats an option by mistake, or expects the two values to be combined,
then gets a result of half the input without a word. :class:`Parser` refuses it instead, in one
line naming the option and both values (exit 2, before anything is read or written). Options that
take several values (``nargs``), collect them (``append``) or are switches (``store_true``) are
as argparse makes them. Subcommands and argument groups of a :class:`Parser` follow the same rule.
"""

import argparse
import shlex


class StoreOnce(argparse.Action):
    """argparse's ``store``, refused when the option was given before on the same command line."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = parser.__dict__.setdefault("_given", {})
        if self.dest in given:
            before_option, before = given[self.dest]
            parser.error(f"{option_string} given twice ({before_option} {_shown(before)}, then {option_string} "
                         f"{_shown(values)}): give it once")
        given[self.dest] = (option_string, values)
        setattr(namespace, self.dest, values)


def _shown(values) -> str:
    """The values as a shell would read them back (a path with a space quoted)."""
    return shlex.join(map(str, values if isinstance(values, list) else [values]))


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose plain options (``action="store"``, the default) are
    :class:`StoreOnce`; its subparsers are parsers of this class too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, StoreOnce)
        self.register("action", "store", StoreOnce)

    def parse_known_args(self, args=None, namespace=None):
        self._given = {}  # the options of this command line (a parser may parse several)
        return super().parse_known_args(args, namespace)
