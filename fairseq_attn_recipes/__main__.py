"""The recipes' steps, called by module from recipes/lib/common.sh:
``python -m fairseq_attn_recipes STEP ...``.

Each step reads whole files and writes its output to ``OUT.tmp`` then renames
it (:mod:`fairseq_attn_records.output_files`), so an interrupted step never leaves a file
that looks finished. Each module declares its steps' parsers beside the steps (``add_parsers``).

Steps: check-tools, check-arch, check-data-dest, check-local-inputs, check-script, check-data, fingerprint, unpack,
concat-parts, extract, tokenize, clean, cap-check, detok, split-compounds, prepare-record,
data-place, data-point, data-replace, run-data, data-list, data-prune, register-run, average, prune-epoch-checkpoints, evaluated-before, run-arch, hyps, eval-text, score, bible-corpus, toy-corpus,
check-positions, concat-test, concat-train, profile, language-facts, fairseq-args, parts-record,
study-export, study-rescore (a committed study's outputs, and its table re-scored from them), study-folder,
study-pack, study-unpack (a study's finished runs carried to another machine), check-variables.
Training: ``python -m fairseq_attn_recipes.train`` (fairseq-train with
the run record, see :mod:`.train`, :mod:`.recording` and :mod:`fairseq_attn_records.run_record`).
"""

import argparse
import importlib
import sys

from fairseq_attn_records.command_line import Parser

from .process_exit import exit_now

#: every step and the module that declares its parser beside it (``add_parsers``), in the order of
#: the help. A step's process imports that module alone (a recipe runs about twenty steps per
#: train.sh and evaluate.sh, and importing every module, sacreBLEU and numpy among them, cost each
#: about 0.2 s here); ``--help`` and an unknown step import them all. tests/test_step_table.py
#: holds the table to what the modules' ``add_parsers`` declare.
STEPS = {
    "check-variables": "variables",
    "check-tools": "preflight", "check-arch": "preflight",
    "check-data-dest": "prepare_dest", "check-local-inputs": "prepare_dest", "data-replace": "prepare_dest",
    "check-script": "corpora", "unpack": "corpora", "concat-parts": "corpora", "parts-record": "corpora",
    "extract": "corpora", "clean": "corpora", "cap-check": "corpora",
    "fingerprint": "fingerprints", "prepare-record": "fingerprints", "check-data": "fingerprints",
    "tokenize": "tokenisation", "detok": "tokenisation", "split-compounds": "tokenisation",
    "bpe-learn": "subwords", "bpe-apply": "subwords",
    "data-place": "databins", "data-point": "databins", "run-data": "databins", "data-list": "databins", "data-prune": "databins",
    "register-run": "databins", "data-register": "databins", "data-forget": "databins",
    "average": "checkpoints", "prune-epoch-checkpoints": "checkpoints",
    "evaluated-before": "evaluations", "run-arch": "evaluations",
    "hyps": "scoring", "eval-text": "scoring", "score": "scoring", "check-comet": "scoring",
    "bible-corpus": "bible_corpus",
    "toy-corpus": "toy_corpus_files",
    "check-positions": "position_limits",
    "concat-test": "concat", "concat-train": "concat",
    "profile": "profiles",
    "language-facts": "languages",
    "fairseq-args": "fairseq_args",
    "study-export": "studies", "study-rescore": "studies", "study-folder": "studies",
    "study-pack": "study_carry", "study-unpack": "study_carry",
}
#: the step modules, in the order of the help
STEP_MODULES = tuple(dict.fromkeys(STEPS.values()))


def step_module(name: str):
    return importlib.import_module(f"fairseq_attn_recipes.{name}")


def cmd_finished_before(args):
    from fairseq_attn_records.run_record import finished_before
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    from .recording import finished_at_a_new_place, refresh_seen
    if not (finished_before(args.save_dir, train_args) or finished_at_a_new_place(args.save_dir, train_args)):
        raise SystemExit(1)
    refresh_seen(args.save_dir)  # a record that could not say what the run has seen: read again
    raise SystemExit(0)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["finished-before"]:  # declared here: train.sh asks it once per run, before training
        wanted = []
    else:
        wanted = [STEPS[argv[0]]] if argv and argv[0] in STEPS else STEP_MODULES
    ap = Parser(prog="python -m fairseq_attn_recipes", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in wanted:
        step_module(name).add_parsers(sub)
    p = sub.add_parser("finished-before", help="exit 0 if the run finished with these very fairseq-train "
                       "arguments, or with them but for where the run and its data lie (a copy, or a moved run: "
                       "its record then takes the new place) (train.sh then starts nothing), else 1")
    p.add_argument("--save-dir", required=True)
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then fairseq-train's arguments")
    p.set_defaults(fn=cmd_finished_before)
    args = ap.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
    exit_now(0)  # without the interpreter's teardown (process_exit.py): check-positions and average import torch
