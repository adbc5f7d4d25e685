"""The recipes' steps, called by module from recipes/lib/common.sh:
``python -m fairseq_attn_recipes STEP ...``.

Each step reads whole files and writes its output to ``OUT.tmp`` then renames
it, so an interrupted step never leaves a file that looks finished.

Steps: check-tools, check-arch, check-script, check-data, fingerprint, unpack,
concat-parts, extract, tokenize, clean, cap-check, detok, split-compounds, prepare-record,
data-place, run-data, data-list, data-prune, register-run, average, evaluated-before, hyps, score, bible-corpus, toy-corpus,
check-positions, concat-test, profile, language-facts, fairseq-args, parts-record. Training: ``python -m fairseq_attn_recipes.train`` (fairseq-train with
the run record, see :mod:`.train`, :mod:`.recording` and :mod:`fairseq_attn_records.run_record`).
"""

import argparse

from fairseq_attn_records.run_record import finished_before

from .bible_corpus import cmd_bible_corpus
from .checkpoints import cmd_average
from .concat import cmd_concat_test
from .corpora import (cmd_cap_check, cmd_check_script, cmd_clean, cmd_concat_parts, cmd_extract, cmd_parts_record,
                      cmd_unpack)
from .databins import cmd_data_list, cmd_data_place, cmd_data_prune, cmd_register_run, cmd_run_data
from .evaluations import cmd_evaluated_before
from .fairseq_args import cmd_fairseq_args
from .fingerprints import cmd_check_data, cmd_fingerprint, cmd_prepare_record
from .languages import cmd_language_facts
from .positions import cmd_check_positions
from .profiles import cmd_profile
from .scoring import cmd_check_comet, cmd_hyps, cmd_score, number_field, text_field
from .subwords import cmd_bpe_apply, cmd_bpe_learn
from .tokenisation import cmd_detok, cmd_split_compounds, cmd_tokenize
from .tools import INSTALL_HINT, cmd_check_arch, cmd_check_tools
from .toy_corpus_files import cmd_toy_corpus


def cmd_finished_before(args):
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    raise SystemExit(0 if finished_before(args.save_dir, train_args) else 1)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m fairseq_attn_recipes", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("check-tools"); p.add_argument("tools", nargs="+", choices=sorted(INSTALL_HINT)); p.set_defaults(fn=cmd_check_tools)
    p = sub.add_parser("check-arch"); p.add_argument("arch", nargs="+"); p.set_defaults(fn=cmd_check_arch)
    p = sub.add_parser("check-script"); p.add_argument("files", nargs="+", help="LANG FILE pairs")
    p.add_argument("--what", default="corpus"); p.add_argument("--sample", type=int, default=1000)
    p.set_defaults(fn=cmd_check_script)
    p = sub.add_parser("fingerprint"); p.add_argument("--set", action="append"); p.add_argument("--out", required=True)
    p.add_argument("--against"); p.add_argument("--in", dest="inputs", action="append", default=[])
    p.set_defaults(fn=cmd_fingerprint)
    p = sub.add_parser("unpack"); p.add_argument("archive"); p.add_argument("dest"); p.set_defaults(fn=cmd_unpack)
    p = sub.add_parser("concat-parts"); p.add_argument("--part", action="append", required=True)
    p.add_argument("--src-lang", required=True); p.add_argument("--tgt-lang", required=True)
    p.add_argument("--src-out", required=True); p.add_argument("--tgt-out", required=True)
    p.add_argument("--record", required=True); p.add_argument("--missing", nargs="*")
    p.set_defaults(fn=cmd_concat_parts)
    p = sub.add_parser("prepare-record"); p.add_argument("--data", required=True); p.add_argument("--set", action="append")
    p.add_argument("--raw-train", required=True); p.add_argument("--clean-train", required=True)
    p.add_argument("--test-ref", required=True); p.add_argument("--parts")
    p.add_argument("--clean-record", help="the clean step's record (the TRAIN_MAX_LEN cap)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=PATH", help="a file the prepare was given (TRAIN_SRC=...)")
    p.add_argument("--raw-record", help="the raw step's marker (the digests of the files it read)")
    p.add_argument("--downloads", help="WORK/downloads.sha256 (the archives downloaded)"); p.set_defaults(fn=cmd_prepare_record)
    p = sub.add_parser("check-data"); p.add_argument("--data", required=True); p.add_argument("--set", action="append")
    p.add_argument("--test-ref"); p.add_argument("--run-dir"); p.add_argument("--require", action="store_true")
    p.add_argument("--print-pairs", action="store_true"); p.set_defaults(fn=cmd_check_data)
    p = sub.add_parser("extract"); p.add_argument("inputs", nargs="+"); p.add_argument("--sep", default=" ||| ")
    p.add_argument("--src-field", type=int, default=-2); p.add_argument("--tgt-field", type=int, default=-1)
    p.add_argument("--max-lines", type=int, default=0); p.add_argument("--src-out", required=True)
    p.add_argument("--tgt-out", required=True); p.add_argument("--docs-out"); p.add_argument("--docs-field", type=int, default=0)
    p.set_defaults(fn=cmd_extract)
    p = sub.add_parser("tokenize"); p.add_argument("--lang", required=True); p.add_argument("--tool")
    p.add_argument("--workers", type=int, default=1); p.add_argument("files", nargs="+"); p.set_defaults(fn=cmd_tokenize)
    p = sub.add_parser("bpe-learn"); p.add_argument("inputs", nargs="+"); p.add_argument("--output", required=True)
    p.add_argument("--tool", default="subword-nmt", choices=["subword-nmt", "sentencepiece"])
    p.add_argument("--merges", type=int, default=32000, help="BPE merges (subword-nmt) / vocabulary size (sentencepiece)")
    p.add_argument("--char-coverage", type=float, default=1.0); p.set_defaults(fn=cmd_bpe_learn)
    p = sub.add_parser("bpe-apply"); p.add_argument("--codes", required=True); p.add_argument("files", nargs="+")
    p.add_argument("--tool", default="subword-nmt", choices=["subword-nmt", "sentencepiece"]); p.set_defaults(fn=cmd_bpe_apply)
    p = sub.add_parser("detok"); p.add_argument("--lang", required=True); p.add_argument("input"); p.add_argument("output"); p.set_defaults(fn=cmd_detok)
    p = sub.add_parser("split-compounds"); p.add_argument("files", nargs="+"); p.set_defaults(fn=cmd_split_compounds)
    p = sub.add_parser("clean")
    for a in ("src-in", "tgt-in", "src-out", "tgt-out"):
        p.add_argument("--" + a, required=True)
    p.add_argument("--min", type=int, default=1); p.add_argument("--max", type=int, default=250)
    p.add_argument("--ratio", type=float, default=1.5)
    p.add_argument("--max-src-words", type=int, help="drop pairs whose --src-raw line has more words (TRAIN_MAX_LEN)")
    p.add_argument("--src-raw", help="source lines the cap counts words of (aligned with --src-in)")
    p.add_argument("--words-of", default="raw", choices=["raw", "tokenised"], help="what --src-raw is (recorded)")
    p.add_argument("--full-src-out"); p.add_argument("--full-tgt-out")
    p.add_argument("--record", help="JSON: what the cap kept and dropped"); p.set_defaults(fn=cmd_clean)
    p = sub.add_parser("cap-check"); p.add_argument("--max-src-words", type=int, required=True)
    p.add_argument("--src-raw", required=True); p.set_defaults(fn=cmd_cap_check)
    p = sub.add_parser("data-place", help="move a finished data-bin to WORK/data/<id>, point WORK/data-bin at it")
    p.add_argument("--tmp", required=True); p.add_argument("--work", required=True); p.set_defaults(fn=cmd_data_place)
    p = sub.add_parser("run-data", help="print the data folder a run was trained on")
    p.add_argument("--run-dir", required=True); p.add_argument("--work"); p.add_argument("--data", help="an explicit DATA")
    p.set_defaults(fn=cmd_run_data)
    p = sub.add_parser("data-list", help="the data folders of WORK/data and the runs that name them")
    p.add_argument("work"); p.set_defaults(fn=cmd_data_list)
    p = sub.add_parser("data-prune", help="show the folders of WORK/data no run record names (removed with --yes)")
    p.add_argument("work"); p.add_argument("--yes", action="store_true", help="remove them (without: only shown)")
    p.set_defaults(fn=cmd_data_prune)
    p = sub.add_parser("register-run", help="record a run folder in WORK/runs.index (list and prune see it)")
    p.add_argument("--work", required=True); p.add_argument("--run-dir", required=True); p.set_defaults(fn=cmd_register_run)
    p = sub.add_parser("average"); p.add_argument("dir"); p.add_argument("--n", type=int, default=5)
    p.add_argument("--output", required=True); p.add_argument("--record"); p.set_defaults(fn=cmd_average)
    p = sub.add_parser("evaluated-before", help="the key of an evaluation (settings, files, checkpoints averaged): "
                       "exit 0 when the folder it publishes to holds this very evaluation, 1 none, 3 another (printed)")
    p.add_argument("--run-dir", required=True); p.add_argument("--n-avg", type=int, required=True)
    p.add_argument("--subset", required=True); p.add_argument("--final", required=True, help="the folder it is published to")
    p.add_argument("--set", action="append", metavar="KEY=VALUE"); p.add_argument("--in", dest="inputs", action="append", default=[])
    p.add_argument("--out", required=True); p.set_defaults(fn=cmd_evaluated_before)
    p = sub.add_parser("hyps"); p.add_argument("input"); p.add_argument("--n", type=int, required=True)
    p.add_argument("--output", required=True); p.set_defaults(fn=cmd_hyps)
    p = sub.add_parser("score"); p.add_argument("--hyp", required=True); p.add_argument("--ref", required=True)
    p.add_argument("--tokenize", default="13a"); p.add_argument("--tok-hyp"); p.add_argument("--tok-ref")
    p.add_argument("--tok-method", default="moses tokenizer.perl (no -a), multi-bleu.perl")
    p.add_argument("--record", action="append", help="JSON files merged into the scores")
    p.add_argument("--text", dest="fields", action="append", type=text_field, metavar="KEY=VALUE",
                   help="a string recorded in the scores (arch_requested=..., checkpoint=...)")
    p.add_argument("--number", dest="fields", action="append", type=number_field, metavar="KEY=VALUE",
                   help="a number recorded in the scores (beam=4, lenpen=0.6)")
    p.add_argument("--output", required=True)
    p.add_argument("--subset", default="test", help="the subset scored (recorded)")
    p.add_argument("--run-dir", help="record the evaluation in this run's run.json")
    p.add_argument("--publish", metavar="DIR", help="the outputs were written aside (the folder of --output, "
                   "--hyp in it): move that folder to DIR in one rename, then record the evaluation")
    p.add_argument("--src", help="source side of the subset (COMET reads it when COMET_MODEL is set)")
    p.set_defaults(fn=cmd_score)
    p = sub.add_parser("check-comet", help="COMET_MODEL, when set, loads (before any other work)")
    p.set_defaults(fn=cmd_check_comet)
    p = sub.add_parser("finished-before", help="exit 0 if the run finished with these very fairseq-train "
                       "arguments (train.sh then starts nothing), else 1")
    p.add_argument("--save-dir", required=True)
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then fairseq-train's arguments")
    p.set_defaults(fn=cmd_finished_before)
    p = sub.add_parser("bible-corpus", help="the Greek-English New Testament of the bible-alignments package")
    p.add_argument("--out"); p.add_argument("--src-lang", default="grc"); p.add_argument("--tgt-lang", default="en")
    p.add_argument("--check", action="store_true", help="only check that the package's data files are there")
    p.set_defaults(fn=cmd_bible_corpus)
    p = sub.add_parser("toy-corpus", help="the demo's embedded synthetic corpus as a recipe's local files")
    p.add_argument("--out", required=True); p.add_argument("--src-lang", required=True)
    p.add_argument("--tgt-lang", required=True); p.add_argument("--sizes", default="train=4000,valid=200,test=400")
    p.add_argument("--seed", type=int, default=0); p.set_defaults(fn=cmd_toy_corpus)
    p = sub.add_parser("check-positions", help="print the position limits ARCH needs for the longest "
                       "valid/test sentence and output (or refuse: learned tables, a limit set in MODEL_ARGS)")
    p.add_argument("--data", required=True); p.add_argument("--arch", nargs="+", required=True)
    p.add_argument("--src", required=True); p.add_argument("--tgt", required=True)
    p.add_argument("--splits", nargs="+", default=["valid", "test"])
    p.add_argument("--max-len-a", type=float, default=0.0); p.add_argument("--max-len-b", type=int, default=200)
    p.add_argument("--model-args", default="", help="MODEL_ARGS, one string"); p.set_defaults(fn=cmd_check_positions)
    p = sub.add_parser("concat-test", help="the test set as groups of k consecutive segments of one document "
                       "(CONCAT of lengths.sh)")
    p.add_argument("--src", required=True); p.add_argument("--ref", required=True)
    p.add_argument("--docs", help="one document id per test line (default: the file is one document)")
    p.add_argument("--ks", required=True, help="CONCAT, e.g. 1,2,4,8"); p.add_argument("--out", required=True)
    p.add_argument("--src-lang", required=True); p.add_argument("--tgt-lang", required=True)
    p.set_defaults(fn=cmd_concat_test)
    # the recipes' facts (profiles.py, languages.py) and fairseq's argument lists (fairseq_args.py)
    p = sub.add_parser("profile", help="a model/training profile as bash defaults (VAR=${VAR:-value} lines)")
    p.add_argument("name", nargs="?", help="base, big, bible, toy, toy-study, demo, demo-quick, paper-quick")
    p.add_argument("--arch", help="the base or big profile of this architecture")
    p.add_argument("--only", nargs="+", metavar="VAR", help="only these variables")
    p.add_argument("--export", action="store_true"); p.set_defaults(fn=cmd_profile)
    p = sub.add_parser("language-facts", help="tokeniser and word counting of languages, as bash arrays")
    p.add_argument("langs", nargs="+"); p.set_defaults(fn=cmd_language_facts)
    p = sub.add_parser("fairseq-args", help="fairseq-train / -preprocess / -generate arguments, one a line")
    p.add_argument("tool", choices=["train", "preprocess", "generate"]); p.add_argument("--data")
    p.add_argument("--user-dir"); p.add_argument("--arch"); p.add_argument("--destdir")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a recipe variable, lowercase")
    p.set_defaults(fn=cmd_fairseq_args)
    p = sub.add_parser("parts-record", help="train.parts.json of training data made of whole files")
    p.add_argument("--part", action="append", required=True, metavar="NAME=FILE")
    p.add_argument("--record", required=True); p.set_defaults(fn=cmd_parts_record)
    args = ap.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
