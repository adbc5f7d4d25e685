"""The toy corpus (the synthetic pair of :mod:`fairseq_attn_records.toy_corpus`) written as a
recipe's local corpus files, for the recipes' QUICK runs (no download, seconds to prepare)."""

import os

from fairseq_attn_records.output_files import write_json

from .step_inputs import die


SIZES_ALLOWED = "split=N for each of train, valid and test once (N >= 1), e.g. train=4000,valid=200,test=400"


def sizes_problem(spec: str) -> str:
    """What is wrong with a sizes spec ('' when nothing): the one rule of ``--sizes`` and QUICK_SIZES."""
    items = [item.partition("=") for item in spec.split(",")]
    if any(split not in ("train", "valid", "test") or not n.isdigit() or int(n) < 1 for split, _, n in items):
        return "not split=N"
    return "" if sorted(split for split, _, _ in items) == ["test", "train", "valid"] else "not each split once"


def parse_sizes(spec: str):
    """``train=4000,valid=200,test=400`` -> (("train", 4000), ("valid", 200), ("test", 400))."""
    if sizes_problem(spec):
        die(f"--sizes {spec!r}: give {SIZES_ALLOWED}")
    return tuple((split, int(n)) for split, _, n in (item.partition("=") for item in spec.split(",")))


def cmd_toy_corpus(args):
    from fairseq_attn_records.toy_corpus import write_corpus
    sizes = parse_sizes(args.sizes)
    write_corpus(args.out, args.src_lang, args.tgt_lang, sizes, args.seed)
    write_json(os.path.join(args.out, "corpus.json"),
               {"corpus": "fairseq_attn_records.toy_corpus", "sizes": dict(sizes), "seed": args.seed}, indent=None)


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("toy-corpus", help="the demo's embedded synthetic corpus as a recipe's local files")
    p.add_argument("--out", required=True); p.add_argument("--src-lang", required=True)
    p.add_argument("--tgt-lang", required=True); p.add_argument("--sizes", default="train=4000,valid=200,test=400")
    p.add_argument("--seed", type=int, default=0); p.set_defaults(fn=cmd_toy_corpus)
