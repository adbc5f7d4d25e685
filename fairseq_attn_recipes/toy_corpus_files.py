"""The toy corpus (the synthetic pair of :mod:`fairseq_attn_records.toy_corpus`) written as a
recipe's local corpus files, for the recipes' QUICK runs (no download, seconds to prepare)."""

import os

from fairseq_attn_records.output_files import write_json

from .step_inputs import die


def parse_sizes(spec: str):
    """``train=4000,valid=200,test=400`` -> (("train", 4000), ("valid", 200), ("test", 400))."""
    sizes = []
    for item in spec.split(","):
        split, _, n = item.partition("=")
        if split not in ("train", "valid", "test") or not n.isdigit() or int(n) < 1:
            die(f"--sizes {spec!r}: give split=N for train, valid and test (N >= 1), e.g. train=4000,valid=200,test=400")
        sizes.append((split, int(n)))
    if sorted(s for s, _ in sizes) != ["test", "train", "valid"]:
        die(f"--sizes {spec!r}: give each of train, valid and test once")
    return tuple(sizes)


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
