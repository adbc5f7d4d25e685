#!/usr/bin/env python3
"""Python steps shared by every recipe (called from recipes/lib/common.sh).

Each step reads whole files and writes its output to ``OUT.tmp`` then renames
it, so an interrupted step never leaves a file that looks finished.

Steps: check-tools, check-arch, check-script, check-data, fingerprint, unpack,
concat-parts, extract, tokenize, clean, detok, split-compounds, prepare-record,
average, hyps, score.
"""

import argparse
import glob
import hashlib
import json
import os
import re
import sys
import unicodedata
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


# ---------------------------------------------------------------- fingerprints
def file_digest(path: str) -> dict:
    """Size, line count and sha256 of a file (a folder: of each file in it, by name)."""
    if os.path.isdir(path):
        return {name: file_digest(os.path.join(path, name)) for name in sorted(os.listdir(path))
                if not name.endswith(".tmp")}
    if not os.path.isfile(path):
        die(f"{path}: no such file")
    h, lines, size = hashlib.sha256(), 0, 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            lines += block.count(b"\n")
            size += len(block)
    return {"bytes": size, "lines": lines, "sha256": h.hexdigest()}


def fingerprint(settings, files) -> dict:
    return {"settings": dict(sorted(settings.items())),
            "inputs": {os.path.abspath(f): file_digest(f) for f in files}}


def _kv(items):
    out = {}
    for item in items or ():
        k, sep, v = item.partition("=")
        if not sep:
            die(f"expected KEY=VALUE, got {item!r}")
        out[k] = v
    return out


def describe_changes(old: dict, new: dict) -> list:
    """Human-readable differences between two fingerprints."""
    out = []
    for k in sorted(set(old.get("settings", {})) | set(new.get("settings", {}))):
        a, b = old.get("settings", {}).get(k), new.get("settings", {}).get(k)
        if a != b:
            out.append(f"{k}: {a!r} -> {b!r}")
    oi, ni = old.get("inputs", {}), new.get("inputs", {})
    for f in sorted(set(oi) | set(ni)):
        if f not in oi:
            out.append(f"new input {f}")
        elif f not in ni:
            out.append(f"input no longer used: {f}")
        elif oi[f] != ni[f]:
            out.append(f"input changed: {f}")
    return out


def cmd_fingerprint(args):
    """What a stage is made from. Exit 0: same as --against; 1: no record; 3: changed (printed)."""
    new = fingerprint(_kv(args.set), args.inputs)
    write_lines_atomic(args.out, [json.dumps(new, sort_keys=True)])
    if not args.against or not os.path.isfile(args.against):
        sys.exit(1)
    with open(args.against, encoding="utf-8") as f:
        try:
            old = json.load(f)
        except json.JSONDecodeError:
            old = {}
    if old == json.loads(json.dumps(new)):
        sys.exit(0)
    print("; ".join(describe_changes(old, new)) or "record unreadable")
    sys.exit(3)


# ---------------------------------------------------------------- script of each side
_EXPECTED_SCRIPT = {"zh": "han", "ja": "japanese", "ko": "hangul"}  # anything else: Latin


def script_profile(lines) -> dict:
    """Share of letters that are Latin, Han, kana and Hangul."""
    counts = {"latin": 0, "han": 0, "kana": 0, "hangul": 0}
    for line in lines:
        for ch in line:
            if not ch.isalpha():
                continue
            name = unicodedata.name(ch, "")
            if name.startswith("CJK"):
                counts["han"] += 1
            elif name.startswith(("HIRAGANA", "KATAKANA")):
                counts["kana"] += 1
            elif name.startswith("HANGUL"):
                counts["hangul"] += 1
            elif "LATIN" in name:
                counts["latin"] += 1
    total = sum(counts.values())
    return {k: (v / total if total else 0.0) for k, v in counts.items()}


def script_problem(lang: str, lines) -> str:
    """'' if the sample looks like ``lang``'s script, else what it looks like."""
    p = script_profile(lines)
    if not any(p.values()):
        return "no letters at all"
    cjk = p["han"] + p["kana"]
    want = _EXPECTED_SCRIPT.get(lang, "latin")
    if want == "latin" and p["latin"] < 0.5:
        return f"{cjk:.0%} of its letters are Chinese/Japanese characters, expected Latin ({lang})"
    if want == "han" and (cjk < 0.5 or p["kana"] > 0.1 * cjk):
        return (f"{p['latin']:.0%} Latin letters and {p['kana']:.0%} kana, "
                f"expected Chinese characters ({lang})")
    if want == "japanese" and (cjk < 0.5 or p["kana"] < 0.1 * cjk):
        return (f"{p['latin']:.0%} Latin letters and {p['kana']:.0%} kana, "
                f"expected Japanese (kanji and kana, {lang})")
    if want == "hangul" and p["hangul"] < 0.5:
        return f"{p['hangul']:.0%} Hangul, expected Korean ({lang})"
    return ""


def _head(path: str, n: int):
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                out.append(line)
                if len(out) >= n:
                    break
    return out


def check_script(path: str, lang: str, what: str, sample: int = 1000) -> None:
    problem = script_problem(lang, _head(path, sample))
    if problem:
        die(f"{what}: {path} does not look like {lang}: in its first {sample} lines {problem}. "
            f"Are the two sides (or SRC/TGT) swapped?")


def cmd_check_script(args):
    """check-script LANG FILE [LANG FILE ...]: the script of a sample of each file."""
    for lang, path in _pairs(args.files):
        check_script(path, lang, args.what, args.sample)


# ---------------------------------------------------------------- corpora
def cmd_unpack(args):
    """Unpack a .tgz/.tar.gz/.zip into a fresh folder (DEST.tmp, renamed when complete);
    a truncated or corrupt archive is an error."""
    import shutil
    import tarfile
    import zipfile
    tmp = args.dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        if zipfile.is_zipfile(args.archive):
            with zipfile.ZipFile(args.archive) as z:
                bad = z.testzip()
                if bad:
                    raise zipfile.BadZipFile(f"member {bad} is corrupt")
                z.extractall(tmp)
        else:
            with tarfile.open(args.archive) as t:
                if hasattr(tarfile, "data_filter"):  # refuses absolute paths and links out of DEST
                    t.extractall(tmp, filter="data")
                else:  # pragma: no cover  (Python without PEP 706)
                    t.extractall(tmp)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        die(f"{args.archive}: cannot unpack ({type(e).__name__}: {e}); the download is truncated or "
            f"corrupt: delete it and re-run to download it again")
    shutil.rmtree(args.dest, ignore_errors=True)
    os.replace(tmp, args.dest)


def _count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))


def cmd_concat_parts(args):
    """concat-parts --part NAME:SRC_GLOB:TGT_GLOB ... : concatenate aligned corpora into the
    training files, after checking each file pair's line count and script; --record writes
    the pair count of each part (JSON)."""
    parts = []
    for spec in args.part:
        name, src_glob, tgt_glob = spec.split(":", 2)
        srcs, tgts = sorted(glob.glob(src_glob)), sorted(glob.glob(tgt_glob))
        if not srcs or len(srcs) != len(tgts):
            die(f"part {name}: {len(srcs)} source files match {src_glob} and {len(tgts)} target files "
                f"match {tgt_glob}")
        n = 0
        for s, t in zip(srcs, tgts):
            ns, nt = _count_lines(s), _count_lines(t)
            if ns != nt or ns == 0:
                die(f"part {name}: {s} has {ns} lines but {t} has {nt}: the corpus is misaligned, "
                    f"truncated or empty")
            check_script(s, args.src_lang, f"part {name} (source side)")
            check_script(t, args.tgt_lang, f"part {name} (target side)")
            n += ns
        parts.append((name, list(zip(srcs, tgts)), n))
    for out, side in ((args.src_out, 0), (args.tgt_out, 1)):
        with open(out + ".tmp", "wb") as fout:
            for _, files, _ in parts:
                for pair in files:
                    with open(pair[side], "rb") as fin:
                        for line in fin:
                            fout.write(line if line.endswith(b"\n") else line + b"\n")
    os.replace(args.src_out + ".tmp", args.src_out)
    os.replace(args.tgt_out + ".tmp", args.tgt_out)
    record = {"parts": {name: n for name, _, n in parts}, "missing": args.missing or [],
              "partial": bool(args.missing)}
    write_lines_atomic(args.record, [json.dumps(record, indent=2)])
    print("training pairs: " + ", ".join(f"{name} {n}" for name, _, n in parts))


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
def checkpoints_to_average(run_dir: str, n: int):
    """The last ``n`` checkpoints, newest first, as fairseq's average_checkpoints.py picks them
    (--num-update-checkpoints when update checkpoints exist, else --num-epoch-checkpoints);
    fewer than ``n`` is an error, not a smaller average."""
    by_update = [(int(m.group(1)), f) for f in os.listdir(run_dir)
                 for m in [re.fullmatch(r"checkpoint_\d+_(\d+)\.pt", f)] if m]
    by_epoch = [(int(m.group(1)), f) for f in os.listdir(run_dir)
                for m in [re.fullmatch(r"checkpoint(\d+)\.pt", f)] if m]
    entries, kind = (by_update, "update") if by_update else (by_epoch, "epoch")
    if len(entries) < n:
        die(f"{run_dir}: {len(entries)} {kind} checkpoints but N_AVG={n} are to be averaged; train "
            f"longer (or keep more with --keep-interval-updates), or set N_AVG to at most {len(entries)} "
            f"and report it")
    return [os.path.join(run_dir, f) for _, f in sorted(entries, reverse=True)[:n]]


def average_states(paths):
    """fairseq's average_checkpoints.py: the other entries from the first (newest) checkpoint;
    fp16 parameters summed in fp32 (other dtypes in their own), in the given order, then divided
    (integers: floor division). Every file goes through fairseq's loader as wrapped by
    fairseq_attn_plugins.checkpoint_safety (torch weights_only with fairseq's classes allowlisted)."""
    import collections

    import torch
    import fairseq_attn_plugins  # noqa: F401  installs the safe loader
    from fairseq import checkpoint_utils

    sums, keys, new_state = collections.OrderedDict(), None, None
    for path in paths:
        try:
            state = checkpoint_utils.load_checkpoint_to_cpu(path)
        except Exception as e:  # refused, corrupt or empty: the loader's message, once, no traceback
            msg = str(e)
            die(msg if os.path.basename(path) in msg else f"{path}: {type(e).__name__}: {msg}")
        if new_state is None:
            new_state = state
        params = state["model"]
        if keys is None:
            keys = list(params)
        elif list(params) != keys:
            die(f"{path}: its parameters differ from {paths[0]}'s; these checkpoints are not of one model")
        for k in keys:
            v = params[k]
            if v.dtype == torch.float16:
                v = v.float()
            if k in sums:
                sums[k] += v
            else:
                sums[k] = v.clone()  # clone: shared parameters appear under several names
    for k, v in sums.items():
        if v.is_floating_point():
            v.div_(len(paths))
        else:
            v //= len(paths)
    new_state["model"] = sums
    return new_state


def _cfg_get(state, *dotted):
    """The first of ``dotted`` found in the checkpoint's cfg (or legacy args)."""
    cfg, args = state.get("cfg"), state.get("args")
    for name in dotted:
        node = cfg
        for part in name.split("."):
            try:
                node = node[part] if hasattr(node, "__getitem__") else getattr(node, part)
            except (KeyError, AttributeError, TypeError, IndexError):
                node = None
            if node is None:
                break
        if node is None and args is not None:
            node = getattr(args, name.split(".")[-1], None)
        if node is not None:
            return list(node) if isinstance(node, (list, tuple)) or type(node).__name__ == "ListConfig" else node
    return None


# the settings that make a number comparable with the papers' (read from the checkpoint itself)
TRAIN_SETTINGS = {
    "arch": ("model._name", "model.arch"), "optimizer": ("optimizer._name",),
    "adam_betas": ("optimizer.adam_betas",), "adam_eps": ("optimizer.adam_eps",),
    "lr": ("optimization.lr",), "lr_scheduler": ("lr_scheduler._name",),
    "warmup_updates": ("lr_scheduler.warmup_updates",), "max_tokens": ("dataset.max_tokens",),
    "update_freq": ("optimization.update_freq",),
    "distributed_world_size": ("distributed_training.distributed_world_size",),
    "max_update": ("optimization.max_update",), "dropout": ("model.dropout",),
    "label_smoothing": ("criterion.label_smoothing",), "fp16": ("common.fp16",), "seed": ("common.seed",),
    "share_all_embeddings": ("model.share_all_embeddings",),
    "share_decoder_input_output_embed": ("model.share_decoder_input_output_embed",),
}


def train_settings(state) -> dict:
    out = {k: _cfg_get(state, *names) for k, names in TRAIN_SETTINGS.items()}
    hist = state.get("optimizer_history") or [{}]
    out["num_updates"] = hist[-1].get("num_updates")
    lr, uf = out["lr"], out["update_freq"]
    out["lr"] = lr[0] if isinstance(lr, (list, tuple)) else lr
    out["update_freq"] = uf[0] if isinstance(uf, (list, tuple)) else uf
    if None not in (out["max_tokens"], out["update_freq"], out["distributed_world_size"]):
        out["tokens_per_update_max"] = out["max_tokens"] * out["update_freq"] * out["distributed_world_size"]
    return out


def cmd_average(args):
    """Average the parameters of the last N checkpoints as fairseq's scripts/average_checkpoints.py
    (that script is not in the pip package); --record writes what was averaged and the training
    settings read from the checkpoint."""
    import torch

    paths = checkpoints_to_average(args.dir, args.n)
    state = average_states(paths)
    if state.get("cfg") is not None and not isinstance(state["cfg"], dict):
        from omegaconf import OmegaConf  # saved as a plain container, as fairseq's trainer does
        state["cfg"] = OmegaConf.to_container(state["cfg"], resolve=True, enum_to_str=True)
    tmp = args.output + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, args.output)
    write_lines_atomic(args.output + ".sources", paths)
    if args.record:
        record = {"n_avg": len(paths), "averaged_checkpoints": [os.path.basename(p) for p in paths]}
        record.update(train_settings(state))
        write_lines_atomic(args.record, [json.dumps(record, indent=2)])
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
        # multi-bleu.perl on tokenised text: sacreBLEU's BLEU with tokenize=none
        tb = BLEU(tokenize="none", force=True)
        t = tb.corpus_score(read_lines(args.tok_hyp), [read_lines(args.tok_ref)])
        out["tokenized_bleu"] = round(t.score, 2)
        out["tokenized_bleu_method"] = args.tok_method
        out["tokenized_bleu_full"] = str(t)
        if "compound" in (args.tok_method or ""):
            out["tokenized_bleu_compound_split"] = out["tokenized_bleu"]
    for path in args.record or ():
        with open(path, encoding="utf-8") as f:
            out.update(json.load(f))
    out.update(json.loads(args.extra or "{}"))
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2)
    os.replace(tmp, args.output)
    print(json.dumps(out, indent=2))


# ---------------------------------------------------------------- what a data-bin was made from
def _data_id(digest: dict) -> str:
    return hashlib.sha256(json.dumps(digest, sort_keys=True).encode()).hexdigest()


def cmd_prepare_record(args):
    """Write DATA/prepare.json: the settings, the training-pair counts and the digests of the
    test reference and of every data-bin file (checked by train.sh and evaluate.sh)."""
    parts = {}
    if args.parts and os.path.isfile(args.parts):
        with open(args.parts, encoding="utf-8") as f:
            parts = json.load(f)
    data = {k: v for k, v in file_digest(args.data).items() if k != "prepare.json"}
    record = {
        "settings": dict(sorted(_kv(args.set).items())),
        "train_pairs": {"raw": _count_lines(args.raw_train), "clean": _count_lines(args.clean_train),
                        "parts": parts.get("parts", {}), "missing_parts": parts.get("missing", []),
                        "partial": bool(parts.get("partial", False))},
        "test_ref": file_digest(args.test_ref),
        "data_id": _data_id(data),
        "data_bin": data,
    }
    write_lines_atomic(os.path.join(args.data, "prepare.json"), [json.dumps(record, indent=2)])


def cmd_check_data(args):
    """The data-bin matches the settings of this run and its record; a run directory was
    trained on this very data-bin (--run-dir: recorded on first use, or --require it)."""
    path = os.path.join(args.data, "prepare.json")
    if not os.path.isfile(path):
        die(f"{args.data} has no prepare.json (not made by this prepare.sh, or by an older one): "
            f"re-run prepare.sh")
    with open(path, encoding="utf-8") as f:
        rec = json.load(f)
    want = dict(sorted(_kv(args.set).items()))
    diff = [f"{k}={rec['settings'].get(k)!r} there, {k}={want.get(k)!r} here"
            for k in sorted(set(want) | set(rec["settings"])) if rec["settings"].get(k) != want.get(k)]
    if diff:
        die(f"{args.data} was prepared with other settings: " + "; ".join(diff) +
            ". Run with the settings it was prepared with, or re-run prepare.sh with these (another WORK/DATA)")
    data = {k: v for k, v in file_digest(args.data).items() if k != "prepare.json"}
    if _data_id(data) != rec["data_id"]:
        changed = sorted(set(data) ^ set(rec["data_bin"]) |
                         {k for k in set(data) & set(rec["data_bin"]) if data[k] != rec["data_bin"][k]})
        die(f"{args.data} changed after prepare.sh wrote it ({', '.join(changed)}): re-run prepare.sh")
    if args.test_ref and file_digest(args.test_ref) != rec["test_ref"]:
        die(f"{args.test_ref} is not the test reference {args.data} was prepared with: re-run prepare.sh")
    if args.run_dir:
        run_rec = os.path.join(args.run_dir, "data.json")
        if os.path.isfile(run_rec):
            with open(run_rec, encoding="utf-8") as f:
                trained_on = json.load(f)
            if trained_on.get("data_id") != rec["data_id"]:
                die(f"{args.run_dir} holds a model trained on another data-bin than {args.data} "
                    f"(prepared with {trained_on.get('settings')}); use another SAVE_DIR")
        elif args.require:
            die(f"{args.run_dir} has no data.json: no record of the data its model was trained on "
                f"(trained by an older train.sh?); train it again with train.sh")
        else:
            os.makedirs(args.run_dir, exist_ok=True)
            write_lines_atomic(run_rec, [json.dumps({"data": os.path.abspath(args.data), "data_id": rec["data_id"],
                                                     "settings": rec["settings"],
                                                     "train_pairs": rec["train_pairs"]}, indent=2)])
    if args.print_pairs:
        print(json.dumps({"train_pairs": rec["train_pairs"]["clean"], "train_pairs_raw": rec["train_pairs"]["raw"],
                          "train_pairs_by_part": rec["train_pairs"]["parts"],
                          "train_data_partial": rec["train_pairs"]["partial"],
                          "prepare_settings": rec["settings"]}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("check-tools"); p.add_argument("tools", nargs="+", choices=sorted(INSTALL_HINT)); p.set_defaults(fn=cmd_check_tools)
    p = sub.add_parser("check-arch"); p.add_argument("arch"); p.set_defaults(fn=cmd_check_arch)
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
    p.add_argument("--test-ref", required=True); p.add_argument("--parts"); p.set_defaults(fn=cmd_prepare_record)
    p = sub.add_parser("check-data"); p.add_argument("--data", required=True); p.add_argument("--set", action="append")
    p.add_argument("--test-ref"); p.add_argument("--run-dir"); p.add_argument("--require", action="store_true")
    p.add_argument("--print-pairs", action="store_true"); p.set_defaults(fn=cmd_check_data)
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
    p.add_argument("--output", required=True); p.add_argument("--record"); p.set_defaults(fn=cmd_average)
    p = sub.add_parser("hyps"); p.add_argument("input"); p.add_argument("--n", type=int, required=True)
    p.add_argument("--output", required=True); p.set_defaults(fn=cmd_hyps)
    p = sub.add_parser("score"); p.add_argument("--hyp", required=True); p.add_argument("--ref", required=True)
    p.add_argument("--tokenize", default="13a"); p.add_argument("--tok-hyp"); p.add_argument("--tok-ref")
    p.add_argument("--tok-method", default="moses tokenizer.perl (no -a), multi-bleu.perl")
    p.add_argument("--record", action="append", help="JSON files merged into the scores")
    p.add_argument("--extra"); p.add_argument("--output", required=True); p.set_defaults(fn=cmd_score)
    args = ap.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
