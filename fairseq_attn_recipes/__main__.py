"""The recipes' steps, called by module from recipes/lib/common.sh:
``python -m fairseq_attn_recipes STEP ...``.

Each step reads whole files and writes its output to ``OUT.tmp`` then renames
it (:mod:`fairseq_attn_records.output_files`), so an interrupted step never leaves a file
that looks finished. Each module declares its steps' parsers beside the steps (``add_parsers``).

Steps: check-tools, check-arch, check-data-dest, check-script, check-data, fingerprint, unpack,
concat-parts, extract, tokenize, clean, cap-check, detok, split-compounds, prepare-record,
data-place, run-data, data-list, data-prune, register-run, average, evaluated-before, hyps, score, bible-corpus, toy-corpus,
check-positions, concat-test, concat-train, profile, language-facts, fairseq-args, parts-record,
study-export, study-rescore (a committed study's outputs, and its table re-scored from them), check-variables.
Training: ``python -m fairseq_attn_recipes.train`` (fairseq-train with
the run record, see :mod:`.train`, :mod:`.recording` and :mod:`fairseq_attn_records.run_record`).
"""

import argparse

from fairseq_attn_records.run_record import finished_before

from . import (bible_corpus, checkpoints, concat, corpora, databins, evaluations, fairseq_args, fingerprints,
               languages, position_limits, preflight, prepare_dest, profiles, scoring, studies, subwords,
               tokenisation, toy_corpus_files, variables)

#: the modules whose steps ``python -m fairseq_attn_recipes`` runs, each declaring its own parsers
#: beside its steps (``add_parsers``), in the order of the help
STEP_MODULES = (variables, preflight, prepare_dest, corpora, fingerprints, tokenisation, subwords, databins, checkpoints,
                evaluations, scoring, bible_corpus, toy_corpus_files, position_limits, concat, profiles, languages,
                fairseq_args, studies)


def cmd_finished_before(args):
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    raise SystemExit(0 if finished_before(args.save_dir, train_args) else 1)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m fairseq_attn_recipes", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for module in STEP_MODULES:
        module.add_parsers(sub)
    p = sub.add_parser("finished-before", help="exit 0 if the run finished with these very fairseq-train "
                       "arguments (train.sh then starts nothing), else 1")
    p.add_argument("--save-dir", required=True)
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then fairseq-train's arguments")
    p.set_defaults(fn=cmd_finished_before)
    args = ap.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
