"""fairseq's preprocess and generate commands as the recipes and the demo run them:
``python -m fairseq_attn_recipes.fairseq_command preprocess|generate ARGS`` is
``python -m fairseq_cli.preprocess|generate ARGS`` with fairseq imported without scikit-learn and
scipy.stats (:mod:`fairseq_attn_records.fairseq_import`: about 1.2 s less per process).

The module runs as ``python -m`` runs it (``runpy``: ``__main__``, ``sys.argv[0]`` its file), so
the arguments, output, logs, exit status and the plugin's behaviour in the command are
fairseq's own; an argument error of a flag a recipe variable gave (PREPROCESS_ARGS, GEN_ARGS, named in
:data:`.flag_origins.ENV`) names that variable.
"""

import runpy
import sys

from fairseq_attn_records.fairseq_import import import_fairseq

from . import flag_origins

COMMANDS = ("preprocess", "generate")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m fairseq_attn_recipes.fairseq_command {{{','.join(COMMANDS)}}} ARGS...: "
              f"{'no command given' if not argv else repr(argv[0]) + ' is not one of them'}", file=sys.stderr)
        return 2
    import_fairseq()
    sys.argv = [sys.argv[0], *argv[1:]]  # runpy puts the module's file in sys.argv[0], as python -m
    if not flag_origins.sources():
        runpy.run_module(f"fairseq_cli.{argv[0]}", run_name="__main__", alter_sys=True)
        return 0
    # flags of recipe variables (PREPROCESS_ARGS, GEN_ARGS): an argument error names the variable. The
    # plugin (--user-dir) imported first: its one-line argparse errors are installed before this hold
    if "--user-dir" in argv[:-1]:  # as fairseq imports it (its memo: not said to be imported twice)
        from argparse import Namespace

        from fairseq import utils
        utils.import_user_module(Namespace(user_dir=argv[argv.index("--user-dir") + 1]))
    try:
        with flag_origins.argument_errors_raised():
            runpy.run_module(f"fairseq_cli.{argv[0]}", run_name="__main__", alter_sys=True)
    except flag_origins.ArgumentError as e:
        return flag_origins.report(e, argv[1:], tool=f"fairseq-{argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
