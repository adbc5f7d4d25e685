#!/usr/bin/env python3
"""Python steps shared by every recipe (called from recipes/lib/common.sh).

Each step reads whole files and writes its output to ``OUT.tmp`` then renames
it, so an interrupted step never leaves a file that looks finished.

Steps: check-tools, check-arch, extract, tokenize, clean, detok, split-compounds,
average, hyps, score.
"""

import argparse
import glob
import json
import os
import re
import sys
from multiprocessing import Pool

TOKENIZERS = {"en": "moses", "de": "moses", "fr": "moses", "zh": "jieba", "ja": "mecab"}
# what to install when a tool is missing
INSTALL_HINT = {
    "moses": "pip install sacremoses",
    "jieba": "pip install jieba",
    "mecab": "pip install fugashi unidic-lite",
    "kytea": "pip install kytea (needs the KyTea C++ library and a model) or use TOKENIZER_JA=mecab",
    "subword-nmt": "pip install subword-nmt",
    "sentencepiece": "pip install sentencepiece",
    "fairseq": "bash scripts/setup_env.sh (installs fairseq into .venv)",
    "sacrebleu": "pip install sacrebleu",
}


def die(msg: str, code: int = 2):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


def write_lines_atomic(path: str, lines) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
    os.replace(tmp, path)


def read_lines(path: str):
    if not os.path.isfile(path):
        die(f"{path}: no such file")
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.rstrip("\r\n") for line in f]


# ---------------------------------------------------------------- tools
def _tool_module(tool: str) -> str:
    return {"moses": "sacremoses", "jieba": "jieba", "mecab": "fugashi", "kytea": "Mykytea",
            "subword-nmt": "subword_nmt", "sentencepiece": "sentencepiece", "fairseq": "fairseq",
            "sacrebleu": "sacrebleu"}[tool]


def cmd_check_tools(args):
    missing = []
    for tool in args.tools:
        try:
            import importlib.util
            if importlib.util.find_spec(_tool_module(tool)) is None:
                raise ImportError(f"no module named {_tool_module(tool)!r}")
            if tool == "mecab":
                import fugashi
                fugashi.Tagger()  # needs a dictionary (unidic-lite)
        except Exception as e:  # ImportError, or a MeCab without dictionary
            missing.append(f"  {tool}: {type(e).__name__}: {e}\n    fix: {INSTALL_HINT[tool]}")
    if missing:
        die("missing tools:\n" + "\n".join(missing))


def cmd_check_arch(args):
    import fairseq_attn_plugins  # noqa: F401  registers the architectures
    from fairseq.models import ARCH_MODEL_REGISTRY
    if args.arch not in ARCH_MODEL_REGISTRY:
        ours = sorted(a for a in ARCH_MODEL_REGISTRY if a.startswith("transformer_") and
                      (a.endswith("_wmt_en_de") or a.endswith("_wmt_en_de_big")))
        die(f"unknown ARCH={args.arch!r}. Set ARCH to a registered architecture, e.g. one of:\n  "
            + "\n  ".join(ours))


# ---------------------------------------------------------------- corpora
def cmd_extract(args):
    """Pick fields from ' ||| '-separated lines (ASPEC) or tab-separated ones."""
    src_out, tgt_out = [], []
    for path in args.inputs:
        for i, line in enumerate(read_lines(path)):
            if args.max_lines and len(src_out) >= args.max_lines:
                break
            fields = line.split(args.sep)
            if len(fields) < 2:
                die(f"{path}:{i + 1}: expected fields separated by {args.sep!r}")
            src_out.append(fields[args.src_field].strip())
            tgt_out.append(fields[args.tgt_field].strip())
    write_lines_atomic(args.src_out, src_out)
    write_lines_atomic(args.tgt_out, tgt_out)


# ---------------------------------------------------------------- tokenisation
_TOK = None


def _init_tokenizer(lang, tool):
    global _TOK
    if tool == "moses":
        from sacremoses import MosesPunctNormalizer, MosesTokenizer
        norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
        # as fairseq's prepare-wmt14en2de.sh: normalise punctuation, tokenizer.perl -a
        _TOK = lambda s: tok.tokenize(norm.normalize(s), aggressive_dash_splits=True,
                                      escape=False, return_str=True)
    elif tool == "moses-plain":  # tokenizer.perl without -a: for tokenised BLEU as the papers report it
        from sacremoses import MosesTokenizer
        tok = MosesTokenizer(lang=lang)
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


def _pairs(files):
    if len(files) % 2:
        die("give INPUT OUTPUT pairs")
    return list(zip(files[::2], files[1::2]))


def cmd_tokenize(args):
    """tokenize --lang L IN OUT [IN OUT ...]"""
    tool = args.tool or TOKENIZERS.get(args.lang, "moses")
    for inp, outp in _pairs(args.files):
        lines = read_lines(inp)
        if args.workers > 1 and len(lines) > 10000:
            with Pool(args.workers, initializer=_init_tokenizer, initargs=(args.lang, tool)) as pool:
                out = pool.map(_tok_line, lines, chunksize=2000)
        else:
            _init_tokenizer(args.lang, tool)
            out = [_tok_line(line) for line in lines]
        write_lines_atomic(outp, out)


def cmd_detok(args):
    lines = read_lines(args.input)
    if TOKENIZERS.get(args.lang, "moses") == "moses":
        from sacremoses import MosesDetokenizer
        md = MosesDetokenizer(lang=args.lang)
        out = [md.detokenize(line.split()) for line in lines]
    else:  # zh / ja: no spaces between words
        out = [re.sub(r"(?<=[^\x00-\x7f]) (?=[^\x00-\x7f])", "", line) for line in lines]
    write_lines_atomic(args.output, out)


def cmd_split_compounds(args):
    """Tokenised BLEU as the Transformer papers report it for En-De (fairseq's
    compound_split_bleu.sh / tensor2tensor get_ende_bleu.sh): 'a-b' -> 'a ##AT##-##AT## b'."""
    for inp, outp in _pairs(args.files):
        write_lines_atomic(outp, [re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", line) for line in read_lines(inp)])


def cmd_clean(args):
    """As Moses' clean-corpus-n.perl: keep pairs with min <= len <= max tokens and length ratio <= ratio."""
    src, tgt = read_lines(args.src_in), read_lines(args.tgt_in)
    if len(src) != len(tgt):
        die(f"{args.src_in} has {len(src)} lines but {args.tgt_in} has {len(tgt)}")
    keep_s, keep_t = [], []
    for s, t in zip(src, tgt):
        ls, lt = len(s.split()), len(t.split())
        if not (args.min <= ls <= args.max and args.min <= lt <= args.max):
            continue
        if ls / lt > args.ratio or lt / ls > args.ratio:
            continue
        keep_s.append(s)
        keep_t.append(t)
    if not keep_s:
        die("cleaning removed every sentence pair; check the corpus files and the language order")
    write_lines_atomic(args.src_out, keep_s)
    write_lines_atomic(args.tgt_out, keep_t)
    print(f"clean: kept {len(keep_s)} of {len(src)} pairs")


# ---------------------------------------------------------------- subwords
def cmd_bpe_learn(args):
    if args.tool == "subword-nmt":
        from subword_nmt.learn_bpe import learn_bpe
        lines = [line + "\n" for path in args.inputs for line in read_lines(path)]
        tmp = args.output + ".tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            learn_bpe(lines, out, args.merges, min_frequency=2)
        os.replace(tmp, args.output)
    else:
        import sentencepiece as spm
        tmp = args.output + ".tmp"
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
    for inp, outp in _pairs(args.files):
        write_lines_atomic(outp, [seg(line) for line in read_lines(inp)])


# ---------------------------------------------------------------- evaluation
def cmd_average(args):
    """Average the parameters of the last N checkpoints (what fairseq's
    scripts/average_checkpoints.py does; that script is not in the pip package)."""
    import collections

    import torch

    import fairseq_attn_plugins  # noqa: F401  allowlists fairseq's checkpoint classes
    by_update = [p for p in glob.glob(os.path.join(args.dir, "checkpoint_*_*.pt"))
                 if re.fullmatch(r"checkpoint_\d+_\d+\.pt", os.path.basename(p))]
    by_epoch = [p for p in glob.glob(os.path.join(args.dir, "checkpoint*.pt"))
                if re.fullmatch(r"checkpoint\d+\.pt", os.path.basename(p))]
    if by_update:
        paths = sorted(by_update, key=lambda p: int(re.search(r"_(\d+)\.pt$", p).group(1)))
    else:
        paths = sorted(by_epoch, key=lambda p: int(re.search(r"(\d+)\.pt$", p).group(1)))
    paths = paths[-args.n:]
    if not paths:
        die(f"no checkpoints to average in {args.dir}; run train.sh first")
    avg, new_state = collections.OrderedDict(), None
    for p in paths:
        # raw state as written by fairseq (as its average_checkpoints.py), so that the
        # result loads like any fairseq checkpoint under weights_only=True
        state = torch.load(p, map_location="cpu")
        new_state = state if new_state is None else new_state
        for k, v in state["model"].items():
            v = v.double() if v.is_floating_point() else v
            avg[k] = v.clone() if k not in avg else avg[k] + v
    for k, v in avg.items():
        if v.is_floating_point():
            ref = new_state["model"][k]
            avg[k] = (v / len(paths)).to(ref.dtype)
    new_state["model"] = avg
    tmp = args.output + ".tmp"
    torch.save(new_state, tmp)
    os.replace(tmp, args.output)
    write_lines_atomic(args.output + ".sources", paths)
    print(f"averaged {len(paths)} checkpoints: " + " ".join(os.path.basename(p) for p in paths))


def cmd_hyps(args):
    """fairseq-generate output -> hypotheses in test-set order."""
    hyps = {}
    for line in read_lines(args.input):
        if line.startswith("H-"):
            parts = line.split("\t")
            hyps[int(parts[0][2:])] = parts[2] if len(parts) > 2 else ""
    if sorted(hyps) != list(range(args.n)):
        die(f"{args.input}: {len(hyps)} hypotheses for a test set of {args.n} sentences")
    write_lines_atomic(args.output, [hyps[i] for i in range(args.n)])


def cmd_score(args):
    from sacrebleu.metrics import BLEU
    hyp, ref = read_lines(args.hyp), read_lines(args.ref)
    if len(hyp) != len(ref):
        die(f"{args.hyp}: {len(hyp)} lines, reference {args.ref}: {len(ref)}")
    bleu = BLEU(tokenize=args.tokenize)
    s = bleu.corpus_score(hyp, [ref])
    out = {"sacrebleu": round(s.score, 2), "signature": str(bleu.get_signature()), "sacrebleu_full": str(s),
           "hyp": os.path.abspath(args.hyp), "ref": os.path.abspath(args.ref)}
    if args.tok_hyp:
        tb = BLEU(tokenize="none", force=True)
        t = tb.corpus_score(read_lines(args.tok_hyp), [read_lines(args.tok_ref)])
        out["tokenized_bleu_compound_split"] = round(t.score, 2)
        out["tokenized_bleu_full"] = str(t)
    out.update(json.loads(args.extra or "{}"))
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2)
    os.replace(tmp, args.output)
    print(json.dumps(out, indent=2))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("check-tools"); p.add_argument("tools", nargs="+", choices=sorted(INSTALL_HINT)); p.set_defaults(fn=cmd_check_tools)
    p = sub.add_parser("check-arch"); p.add_argument("arch"); p.set_defaults(fn=cmd_check_arch)
    p = sub.add_parser("extract"); p.add_argument("inputs", nargs="+"); p.add_argument("--sep", default=" ||| ")
    p.add_argument("--src-field", type=int, default=-2); p.add_argument("--tgt-field", type=int, default=-1)
    p.add_argument("--max-lines", type=int, default=0); p.add_argument("--src-out", required=True)
    p.add_argument("--tgt-out", required=True); p.set_defaults(fn=cmd_extract)
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
    p.add_argument("--ratio", type=float, default=1.5); p.set_defaults(fn=cmd_clean)
    p = sub.add_parser("average"); p.add_argument("dir"); p.add_argument("--n", type=int, default=5)
    p.add_argument("--output", required=True); p.set_defaults(fn=cmd_average)
    p = sub.add_parser("hyps"); p.add_argument("input"); p.add_argument("--n", type=int, required=True)
    p.add_argument("--output", required=True); p.set_defaults(fn=cmd_hyps)
    p = sub.add_parser("score"); p.add_argument("--hyp", required=True); p.add_argument("--ref", required=True)
    p.add_argument("--tokenize", default="13a"); p.add_argument("--tok-hyp"); p.add_argument("--tok-ref")
    p.add_argument("--extra"); p.add_argument("--output", required=True); p.set_defaults(fn=cmd_score)
    args = ap.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
