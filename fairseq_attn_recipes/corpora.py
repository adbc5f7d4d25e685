"""Corpora: the script of each side, archives, aligned parts, extraction and cleaning."""

import glob
import json
import os
import unicodedata

from fairseq_attn_records.output_files import replace_folder, replacing, write_lines

from .languages import language
from .step_inputs import count_lines, die, pairs, read_lines


def script_profile(lines) -> dict:
    """Share of letters that are Latin, Greek, Han, kana and Hangul."""
    counts = {"latin": 0, "greek": 0, "han": 0, "kana": 0, "hangul": 0}
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
            elif name.startswith("GREEK"):
                counts["greek"] += 1
    total = sum(counts.values())
    return {k: (v / total if total else 0.0) for k, v in counts.items()}


def script_problem(lang: str, lines) -> str:
    """'' if the sample looks like ``lang``'s script, else what it looks like."""
    p = script_profile(lines)
    if not any(p.values()):
        return "no letters at all"
    cjk = p["han"] + p["kana"]
    want = language(lang).script
    if want == "latin" and p["latin"] < 0.5 and p["greek"] >= 0.5:
        return f"{p['greek']:.0%} of its letters are Greek, expected Latin ({lang})"
    if want == "latin" and p["latin"] < 0.5:
        return f"{cjk:.0%} of its letters are Chinese/Japanese characters, expected Latin ({lang})"
    if want == "han" and (cjk < 0.5 or p["kana"] > 0.1 * cjk):
        return (f"{p['latin']:.0%} Latin letters and {p['kana']:.0%} kana, "
                f"expected Chinese characters ({lang})")
    if want == "japanese" and (cjk < 0.5 or p["kana"] < 0.1 * cjk):
        return (f"{p['latin']:.0%} Latin letters and {p['kana']:.0%} kana, "
                f"expected Japanese (kanji and kana, {lang})")
    if want == "greek" and p["greek"] < 0.5:
        return f"{p['greek']:.0%} Greek letters, expected Greek ({lang})"
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
    for lang, path in pairs(args.files):
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
    replace_folder(tmp, args.dest)


def write_parts_record(path: str, counts: dict, missing: list) -> None:
    """train.parts.json: the pair count of each part of the training data, the parts left out."""
    record = {"parts": counts, "missing": list(missing), "partial": bool(missing)}
    write_lines(path, [json.dumps(record, indent=2)])


def cmd_parts_record(args):
    """parts-record --part NAME=FILE ... --record OUT: the training data is these whole files
    (a recipe's one download, the user's local files): each part's pairs are FILE's lines."""
    counts = {}
    for spec in args.part:
        name, sep, path = spec.partition("=")
        if not sep or not os.path.isfile(path):
            die(f"--part {spec!r}: give NAME=FILE, an existing file of the part's source side")
        counts[name] = count_lines(path)
    write_parts_record(args.record, counts, [])


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
            ns, nt = count_lines(s), count_lines(t)
            if ns != nt or ns == 0:
                die(f"part {name}: {s} has {ns} lines but {t} has {nt}: the corpus is misaligned, "
                    f"truncated or empty")
            check_script(s, args.src_lang, f"part {name} (source side)")
            check_script(t, args.tgt_lang, f"part {name} (target side)")
            n += ns
        parts.append((name, list(zip(srcs, tgts)), n))
    for out, side in ((args.src_out, 0), (args.tgt_out, 1)):
        with replacing(out, "wb") as fout:
            for _, files, _ in parts:
                for pair in files:
                    with open(pair[side], "rb") as fin:
                        for line in fin:
                            fout.write(line if line.endswith(b"\n") else line + b"\n")
    write_parts_record(args.record, {name: n for name, _, n in parts}, args.missing or [])
    print("training pairs: " + ", ".join(f"{name} {n}" for name, _, n in parts))


def cmd_extract(args):
    """Pick fields from ' ||| '-separated lines (ASPEC) or tab-separated ones (with --docs-out,
    the document id of each line too)."""
    src_out, tgt_out, docs_out = [], [], []
    for path in args.inputs:
        for i, line in enumerate(read_lines(path)):
            if args.max_lines and len(src_out) >= args.max_lines:
                break
            fields = line.split(args.sep)
            if len(fields) < 2:
                die(f"{path}:{i + 1}: expected fields separated by {args.sep!r}")
            src_out.append(fields[args.src_field].strip())
            tgt_out.append(fields[args.tgt_field].strip())
            if args.docs_out:
                if len(fields) < 4:
                    die(f"{path}:{i + 1}: expected a document ID and a sentence ID before the two sentences "
                        f"(fields separated by {args.sep!r})")
                docs_out.append(fields[args.docs_field].strip())
    write_lines(args.src_out, src_out)
    write_lines(args.tgt_out, tgt_out)
    if args.docs_out:
        write_lines(args.docs_out, docs_out)


def cap_keep(src_words, max_words: int, what: str):
    """Which training pairs a source-length cap keeps: ``src_words`` the source lines the cap
    counts words of. A cap that keeps every pair or none is refused (one line)."""
    if max_words < 1:
        die(f"TRAIN_MAX_LEN={max_words}: give the most source words a training pair may have, a positive integer")
    lengths = [len(line.split()) for line in src_words]
    longest = max(lengths, default=0)
    if longest <= max_words:
        die(f"TRAIN_MAX_LEN={max_words} keeps every training pair (the longest source has {longest} words): "
            f"nothing is capped; unset TRAIN_MAX_LEN or give a smaller one (words counted in {what})")
    keep = [n <= max_words for n in lengths]
    if not any(keep):
        die(f"TRAIN_MAX_LEN={max_words} leaves no training pair (the shortest source has {min(lengths)} words): "
            f"give a larger one (words counted in {what})")
    return keep


def cmd_cap_check(args):
    """cap-check --max-src-words N --src-raw FILE: the cap is usable (before any long work)."""
    keep = cap_keep(read_lines(args.src_raw), args.max_src_words, args.src_raw)
    print(f"TRAIN_MAX_LEN={args.max_src_words} keeps {sum(keep)} of {len(keep)} training pairs ({args.src_raw})")


def cmd_clean(args):
    """As Moses' clean-corpus-n.perl: keep pairs with min <= len <= max tokens and length ratio <= ratio.
    With --max-src-words N --src-raw FILE, also drop the pairs whose line in FILE (aligned with the
    inputs) has more than N whitespace-separated words; --record writes what the cap kept and dropped,
    --full-src-out/--full-tgt-out the cleaned pairs without the cap (the dictionary's input);
    --docs-in/--docs-out the document id of each kept pair (TRAIN_CONCAT joins pairs of one document)."""
    src, tgt = read_lines(args.src_in), read_lines(args.tgt_in)
    if len(src) != len(tgt):
        die(f"{args.src_in} has {len(src)} lines but {args.tgt_in} has {len(tgt)}")
    docs = read_lines(args.docs_in) if args.docs_in else [""] * len(src)
    if len(docs) != len(src):
        die(f"{args.docs_in} has {len(docs)} document ids but {args.src_in} has {len(src)} lines: not aligned")
    capped = [True] * len(src)
    cap = None
    if args.max_src_words is not None:
        if not args.src_raw:
            die("clean --max-src-words needs --src-raw (the source lines whose words are counted)")
        counted = read_lines(args.src_raw)
        if len(counted) != len(src):
            die(f"{args.src_raw} has {len(counted)} lines but {args.src_in} has {len(src)}: not aligned")
        capped = cap_keep(counted, args.max_src_words, args.src_raw)
        cap = {"max_src_words": args.max_src_words, "words_of": args.words_of, "counted_in": os.path.abspath(args.src_raw),
               "kept": sum(capped), "dropped": len(capped) - sum(capped),
               "shared_with_uncapped": "BPE codes, dictionary (made from the cleaned pairs without the cap)"}
    keep_s, keep_t, full_s, full_t, keep_d = [], [], [], [], []
    for s, t, in_cap, d in zip(src, tgt, capped, docs):
        ls, lt = len(s.split()), len(t.split())
        if not (args.min <= ls <= args.max and args.min <= lt <= args.max):
            continue
        if ls / lt > args.ratio or lt / ls > args.ratio:
            continue
        full_s.append(s)
        full_t.append(t)
        if in_cap:
            keep_s.append(s)
            keep_t.append(t)
            keep_d.append(d)
    if not keep_s:
        die("cleaning removed every sentence pair; check the corpus files and the language order")
    write_lines(args.src_out, keep_s)
    write_lines(args.tgt_out, keep_t)
    if args.docs_out:
        write_lines(args.docs_out, keep_d)
    if args.full_src_out:  # the cleaned pairs without the cap: what the dictionary is made from
        write_lines(args.full_src_out, full_s)
        write_lines(args.full_tgt_out, full_t)
    if args.record:
        write_lines(args.record, [json.dumps({"cap": cap}, indent=2)])
    if cap:
        print(f"clean: TRAIN_MAX_LEN={cap['max_src_words']} dropped {cap['dropped']} of {len(src)} pairs")
    print(f"clean: kept {len(keep_s)} of {len(src)} pairs")


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("check-script"); p.add_argument("files", nargs="+", help="LANG FILE pairs")
    p.add_argument("--what", default="corpus"); p.add_argument("--sample", type=int, default=1000)
    p.set_defaults(fn=cmd_check_script)
    p = sub.add_parser("unpack"); p.add_argument("archive"); p.add_argument("dest"); p.set_defaults(fn=cmd_unpack)
    p = sub.add_parser("concat-parts"); p.add_argument("--part", action="append", required=True)
    p.add_argument("--src-lang", required=True); p.add_argument("--tgt-lang", required=True)
    p.add_argument("--src-out", required=True); p.add_argument("--tgt-out", required=True)
    p.add_argument("--record", required=True); p.add_argument("--missing", nargs="*")
    p.set_defaults(fn=cmd_concat_parts)
    p = sub.add_parser("parts-record", help="train.parts.json of training data made of whole files")
    p.add_argument("--part", action="append", required=True, metavar="NAME=FILE")
    p.add_argument("--record", required=True); p.set_defaults(fn=cmd_parts_record)
    p = sub.add_parser("extract"); p.add_argument("inputs", nargs="+"); p.add_argument("--sep", default=" ||| ")
    p.add_argument("--src-field", type=int, default=-2); p.add_argument("--tgt-field", type=int, default=-1)
    p.add_argument("--max-lines", type=int, default=0); p.add_argument("--src-out", required=True)
    p.add_argument("--tgt-out", required=True); p.add_argument("--docs-out"); p.add_argument("--docs-field", type=int, default=0)
    p.set_defaults(fn=cmd_extract)
    p = sub.add_parser("clean")
    for a in ("src-in", "tgt-in", "src-out", "tgt-out"):
        p.add_argument("--" + a, required=True)
    p.add_argument("--min", type=int, default=1); p.add_argument("--max", type=int, default=250)
    p.add_argument("--ratio", type=float, default=1.5)
    p.add_argument("--max-src-words", type=int, help="drop pairs whose --src-raw line has more words (TRAIN_MAX_LEN)")
    p.add_argument("--src-raw", help="source lines the cap counts words of (aligned with --src-in)")
    p.add_argument("--words-of", default="raw", choices=["raw", "tokenised"], help="what --src-raw is (recorded)")
    p.add_argument("--full-src-out"); p.add_argument("--full-tgt-out")
    p.add_argument("--docs-in", help="one document id per input pair"); p.add_argument("--docs-out")
    p.add_argument("--record", help="JSON: what the cap kept and dropped"); p.set_defaults(fn=cmd_clean)
    p = sub.add_parser("cap-check"); p.add_argument("--max-src-words", type=int, required=True)
    p.add_argument("--src-raw", required=True); p.set_defaults(fn=cmd_cap_check)
