"""The bible corpus step (``python -m fairseq_attn_recipes bible-corpus``): the verse pairs of
:mod:`.bible` split by chapter, with each line's verse id and chapter, and the gold word alignments
of valid and test (:mod:`.bible_gold`)."""

import json
import os

from fairseq_attn_records.output_files import write_lines

from .bible import PACKAGE, SPLIT_RULE, chapter_of, data_files, verse_pairs
from .bible_gold import BibleGold, package_files, write_gold


def cmd_bible_corpus(args):
    """bible-corpus --out DIR --src-lang grc --tgt-lang en: DIR/{train,valid,test}.{SRC,TGT},
    DIR/{split}.ids (verse ids), DIR/{split}.docs (their chapters), DIR/{valid,test}.align (the gold
    word alignments, Pharaoh) and DIR/corpus.json (package version, pair counts)."""
    if args.check:  # the data files are there: prints the package and its version
        print(f"{PACKAGE} {data_files()[2]}")
        return
    splits, version = verse_pairs()
    os.makedirs(args.out, exist_ok=True)
    # the gold of the verses of valid and test alone (bible_gold: each verse's links are its own)
    gold = BibleGold(*package_files(), verses={v for split in ("valid", "test") for v, _, _ in splits.get(split, ())})
    for split, rows in splits.items():
        write_lines(os.path.join(args.out, f"{split}.{args.src_lang}"), [g for _, g, _ in rows])
        write_lines(os.path.join(args.out, f"{split}.{args.tgt_lang}"), [e for _, _, e in rows])
        write_lines(os.path.join(args.out, f"{split}.ids"), [v for v, _, _ in rows])
        write_lines(os.path.join(args.out, f"{split}.docs"), [chapter_of(v) for v, _, _ in rows])
        if split != "train":  # the gold word alignments (bible_gold): each line's verse ids
            write_gold(os.path.join(args.out, f"{split}.align"), [[v] for v, _, _ in rows],
                       [g for _, g, _ in rows], [e for _, _, e in rows], gold)
    info = {"package": PACKAGE, "version": version, "pairs": {s: len(r) for s, r in splits.items()},
            "split": SPLIT_RULE}
    write_lines(os.path.join(args.out, "corpus.json"), [json.dumps(info, indent=2)])
    print(json.dumps(info["pairs"]))


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("bible-corpus", help="the Greek-English New Testament of the bible-alignments package")
    p.add_argument("--out"); p.add_argument("--src-lang", default="grc"); p.add_argument("--tgt-lang", default="en")
    p.add_argument("--check", action="store_true", help="only check that the package's data files are there")
    p.set_defaults(fn=cmd_bible_corpus)
