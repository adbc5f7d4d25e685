"""The toy corpus (the synthetic pair of :mod:`fairseq_attn_plugins.toy_corpus`) written as a
recipe's local corpus files, for the recipes' QUICK runs (no download, seconds to prepare)."""

import json
import os

from .files import die


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
    from fairseq_attn_plugins.toy_corpus import write_corpus
    sizes = parse_sizes(args.sizes)
    write_corpus(args.out, args.src_lang, args.tgt_lang, sizes, args.seed)
    with open(os.path.join(args.out, "corpus.json.tmp"), "w", encoding="utf-8") as f:
        json.dump({"corpus": "fairseq_attn_plugins.toy_corpus", "sizes": dict(sizes), "seed": args.seed}, f)
    os.replace(os.path.join(args.out, "corpus.json.tmp"), os.path.join(args.out, "corpus.json"))
