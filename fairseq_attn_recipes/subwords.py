"""Subwords: BPE learned and applied with subword-nmt or sentencepiece."""

import os

from fairseq_attn_records.output_files import replacing, write_lines

from .step_inputs import pairs, read_lines


def cmd_bpe_learn(args):
    if args.tool == "subword-nmt":
        from subword_nmt.learn_bpe import learn_bpe
        lines = [line + "\n" for path in args.inputs for line in read_lines(path)]
        with replacing(args.output) as out:
            learn_bpe(lines, out, args.merges, min_frequency=2)
    else:
        import sentencepiece as spm
        tmp = args.output + ".tmp"  # sentencepiece names its two files itself: PREFIX.model, PREFIX.vocab
        spm.SentencePieceTrainer.train(input=",".join(args.inputs), model_prefix=tmp, model_type="bpe",
                                       vocab_size=args.merges, character_coverage=args.char_coverage,
                                       input_sentence_size=10_000_000, shuffle_input_sentence=True,
                                       hard_vocab_limit=False, minloglevel=2)
        os.replace(tmp + ".vocab", args.output + ".vocab")
        os.replace(tmp + ".model", args.output)


def cmd_bpe_apply(args):
    """bpe-apply --codes C IN OUT [IN OUT ...]"""
    if args.tool == "subword-nmt":
        from subword_nmt.apply_bpe import BPE
        with open(args.codes, encoding="utf-8") as f:
            bpe = BPE(f)
        seg = bpe.process_line
    else:
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=args.codes)
        seg = lambda line: " ".join(sp.encode(line, out_type=str))
    for inp, outp in pairs(args.files):
        write_lines(outp, [seg(line) for line in read_lines(inp)])


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("bpe-learn"); p.add_argument("inputs", nargs="+"); p.add_argument("--output", required=True)
    p.add_argument("--tool", default="subword-nmt", choices=["subword-nmt", "sentencepiece"])
    p.add_argument("--merges", type=int, default=32000, help="BPE merges (subword-nmt) / vocabulary size (sentencepiece)")
    p.add_argument("--char-coverage", type=float, default=1.0); p.set_defaults(fn=cmd_bpe_learn)
    p = sub.add_parser("bpe-apply"); p.add_argument("--codes", required=True); p.add_argument("files", nargs="+")
    p.add_argument("--tool", default="subword-nmt", choices=["subword-nmt", "sentencepiece"]); p.set_defaults(fn=cmd_bpe_apply)
