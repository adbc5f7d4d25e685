"""Tokenisation (Moses, jieba, MeCab, KyTea), detokenisation and compound splitting."""

import re
from multiprocessing import Pool

from fairseq_attn_records.fairseq_import import import_sacremoses
from fairseq_attn_records.output_files import write_lines

from .languages import language
from .step_inputs import die, pairs, read_lines

_TOK = None


def _init_tokenizer(lang, tool):
    global _TOK
    if tool == "moses":
        sacremoses = import_sacremoses()
        norm, tok = sacremoses.MosesPunctNormalizer(lang=lang), sacremoses.MosesTokenizer(lang=lang)
        # as fairseq's prepare-wmt14en2de.sh: normalise punctuation, tokenizer.perl -a
        _TOK = lambda s: tok.tokenize(norm.normalize(s), aggressive_dash_splits=True,
                                      escape=False, return_str=True)
    elif tool == "moses-plain":  # tokenizer.perl without -a: for tokenised BLEU as the papers report it
        tok = import_sacremoses().MosesTokenizer(lang=lang)
        _TOK = lambda s: tok.tokenize(s, escape=False, return_str=True)
    elif tool == "jieba":
        import logging

        import jieba
        jieba.setLogLevel(logging.WARNING)
        _TOK = lambda s: " ".join(w for w in jieba.cut(s.strip()) if w.strip())
    elif tool == "mecab":
        import fugashi
        tagger = fugashi.Tagger()
        _TOK = lambda s: " ".join(w.surface for w in tagger(s.strip()))
    elif tool == "kytea":
        import Mykytea
        kt = Mykytea.Mykytea("")
        _TOK = lambda s: " ".join(kt.getWS(s.strip()))
    else:
        die(f"unknown tokenizer {tool!r}")


def _tok_line(line):
    return " ".join(_TOK(line).split())


def tokenize_files(lang: str, tool, files, workers: int = 1) -> None:
    """IN OUT pairs of ``files``: each line of IN tokenised by ``tool`` (default: LANG's tokeniser)."""
    tool = tool or language(lang).tokenizer
    for inp, outp in pairs(files):
        lines = read_lines(inp)
        if workers > 1 and len(lines) > 10000:
            with Pool(workers, initializer=_init_tokenizer, initargs=(lang, tool)) as pool:
                out = pool.map(_tok_line, lines, chunksize=2000)
        else:
            _init_tokenizer(lang, tool)
            out = [_tok_line(line) for line in lines]
        write_lines(outp, out)


def cmd_tokenize(args):
    """tokenize --lang L IN OUT [IN OUT ...]"""
    tokenize_files(args.lang, args.tool, args.files, args.workers)


def detok_file(lang: str, inp: str, outp: str) -> None:
    lines = read_lines(inp)
    if language(lang).spaced:
        md = import_sacremoses().MosesDetokenizer(lang=lang)
        out = [md.detokenize(line.split()) for line in lines]
    else:  # words written without spaces (zh, ja): the spaces between non-ASCII tokens removed
        out = [re.sub(r"(?<=[^\x00-\x7f]) (?=[^\x00-\x7f])", "", line) for line in lines]
    write_lines(outp, out)


def cmd_detok(args):
    detok_file(args.lang, args.input, args.output)


def split_compounds_files(files) -> None:
    """Tokenised BLEU as the Transformer papers report it for En-De (fairseq's
    compound_split_bleu.sh / tensor2tensor get_ende_bleu.sh): 'a-b' -> 'a ##AT##-##AT## b'."""
    for inp, outp in pairs(files):
        write_lines(outp, [re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", line) for line in read_lines(inp)])


def cmd_split_compounds(args):
    split_compounds_files(args.files)


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("tokenize"); p.add_argument("--lang", required=True); p.add_argument("--tool")
    p.add_argument("--workers", type=int, default=1); p.add_argument("files", nargs="+"); p.set_defaults(fn=cmd_tokenize)
    p = sub.add_parser("detok"); p.add_argument("--lang", required=True); p.add_argument("input"); p.add_argument("output"); p.set_defaults(fn=cmd_detok)
    p = sub.add_parser("split-compounds"); p.add_argument("files", nargs="+"); p.set_defaults(fn=cmd_split_compounds)
