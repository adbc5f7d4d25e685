"""fairseq's preprocess and generate commands as the recipes and the demo run them:
``python -m fairseq_attn_recipes.fairseq_command preprocess|generate ARGS`` is
``python -m fairseq_cli.preprocess|generate ARGS`` with fairseq imported without scikit-learn and
scipy.stats (:mod:`fairseq_attn_records.fairseq_import`: about 1.2 s less per process).

The module runs as ``python -m`` runs it (``runpy``: ``__main__``, ``sys.argv[0]`` its file), so
the arguments, output, logs, exit status and the plugin's behaviour in the command are
fairseq's own.
"""

import runpy
import sys

from fairseq_attn_records.fairseq_import import import_fairseq

COMMANDS = ("preprocess", "generate")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m fairseq_attn_recipes.fairseq_command {{{','.join(COMMANDS)}}} ARGS...: "
              f"{'no command given' if not argv else repr(argv[0]) + ' is not one of them'}", file=sys.stderr)
        return 2
    import_fairseq()
    sys.argv = [sys.argv[0], *argv[1:]]  # runpy puts the module's file in sys.argv[0], as python -m
    runpy.run_module(f"fairseq_cli.{argv[0]}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
