"""Long inputs from whole documents (``concat-test``, called by ``recipes/lib/lengths.sh`` for
``CONCAT=1,2,4,8``): the test set as consecutive, non-overlapping groups of k segments of one
document, the protocol of document-level MT and of Varis & Bojar (2021) for inputs several
times longer than any seen in training.

* **Documents**: one id per test line (``--docs``); a document is a run of consecutive lines
  with the same id (an id that comes back later starts another run). Without ``--docs`` the
  test file, in order, is one document.
* **Groups of k**: within each document, lines ``0..k-1``, ``k..2k-1``, ...; a group left short
  at the document's end is dropped, so every input of k holds exactly k segments. The source
  segments of a group are joined by one space, the references likewise.
* k = 1 is the test set itself (nothing is written for it). A k for which no document has k
  segments is skipped with a note (stderr), the other k go on.

Writes, for every other k, ``OUT/k<k>.<src>``, ``OUT/k<k>.<tgt>`` and ``OUT/k<k>.docs`` (the
document id of each group), then ``OUT/concat.json`` (per k: groups, documents, mean and largest
source length in words, the first line of each group), each file written aside then renamed;
prints the k that have groups, one per line.

``concat-train`` (``TRAIN_CONCAT`` of the data step, e.g. ``2`` or ``2,4``): concatenation
training (Nguyen et al. 2021; Kondo et al. 2021; Varis & Bojar 2021), the standard remedy for
outputs that stop early on long inputs. Every training pair kept by the cap and the cleaning
(the cap applies to these original pairs) is also joined with its next k - 1 kept pairs of the
same document (source with source, target with target, one space between), for each k given;
the joined pairs follow the original pairs in the training set. A pair whose document has
fewer than k - 1 kept pairs after it starts no group of k. Without document ids (``--docs``),
each pair is joined with k - 1 other pairs drawn at random (``random.Random(seed)``, without
the pair itself; Nguyen et al. found random pairs about as good as consecutive ones). The
groups (1-based lines of the kept pairs) are written beside (``--groups-out``) and counted in
``--record``.
"""

import json
import os
import random
import sys
from typing import List, Optional, Sequence

from fairseq_attn_records.output_files import write_lines

from .step_inputs import die, read_lines

ONE_DOCUMENT = "the test file in order as one document (no document ids given)"


def parse_ks(spec: str) -> List[int]:
    """``"1,2,4,8"`` -> [1, 2, 4, 8]; positive integers, none repeated; else a one-line error."""
    parts = [s.strip() for s in (spec or "").split(",")]
    if not spec or any(not (p.isascii() and p.isdigit()) or int(p) < 1 for p in parts):
        die(f"CONCAT={spec}: give the numbers of segments joined into one input, positive integers "
            f"separated by commas (e.g. 1,2,4,8; 1 = the test set as it is)")
    ks = [int(p) for p in parts]
    repeated = sorted({k for k in ks if ks.count(k) > 1})
    if repeated:
        die(f"CONCAT={spec}: {','.join(map(str, repeated))} given twice")
    return ks


def document_runs(doc_ids: Sequence[str]) -> List[List[int]]:
    """Line indices of each document: runs of consecutive lines with the same id."""
    runs: List[List[int]] = []
    for i, d in enumerate(doc_ids):
        if runs and doc_ids[runs[-1][0]] == d:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def groups_of(doc_ids: Sequence[str], k: int) -> List[List[int]]:
    """The consecutive, non-overlapping groups of k lines within each document (short ends dropped)."""
    out = []
    for run in document_runs(doc_ids):
        out += [run[i:i + k] for i in range(0, len(run) - k + 1, k)]
    return out


def read_docs(path: Optional[str], n_lines: int, src_path: str) -> List[str]:
    if not path:
        return ["document"] * n_lines
    docs = read_lines(path)
    if len(docs) != n_lines:
        die(f"TEST_DOCS={path}: {len(docs)} lines, but the test source {src_path} has {n_lines}: "
            f"give one document id per test line")
    if any(not d.strip() for d in docs):
        die(f"TEST_DOCS={path}: line {next(i for i, d in enumerate(docs) if not d.strip()) + 1} is empty: "
            f"give one document id per test line")
    return [d.strip() for d in docs]


def cmd_concat_test(args):
    ks = parse_ks(args.ks)
    src, ref = read_lines(args.src), read_lines(args.ref)
    if len(src) != len(ref):
        die(f"{args.src} has {len(src)} lines but {args.ref} has {len(ref)}")
    docs = read_docs(args.docs, len(src), args.src)
    runs = document_runs(docs)
    os.makedirs(args.out, exist_ok=True)
    info = {"documents": os.path.abspath(args.docs) if args.docs else ONE_DOCUMENT,
            "n_documents": len(runs), "longest_document": max(len(r) for r in runs), "k": {}}
    usable = []
    for k in ks:
        groups = groups_of(docs, k)
        if not groups:
            print(f"CONCAT: no document has {k} segments (the longest has {info['longest_document']}): "
                  f"k = {k} skipped", file=sys.stderr)
            continue
        usable.append(k)
        joined_src = [" ".join(src[i] for i in g) for g in groups]
        words = [len(s.split()) for s in joined_src]
        info["k"][str(k)] = {"n": len(groups), "documents": len({docs[g[0]] for g in groups}),
                             "mean_src_words": sum(words) / len(words), "max_src_words": max(words),
                             "first_lines": [g[0] + 1 for g in groups]}
        if k == 1:
            continue
        base = os.path.join(args.out, f"k{k}")
        write_lines(f"{base}.{args.src_lang}", joined_src)
        write_lines(f"{base}.{args.tgt_lang}", [" ".join(ref[i] for i in g) for g in groups])
        write_lines(f"{base}.docs", [docs[g[0]] for g in groups])
    write_lines(os.path.join(args.out, "concat.json"), [json.dumps(info, indent=1)])
    for k in usable:
        print(k)


def parse_train_ks(spec: str) -> List[int]:
    """``TRAIN_CONCAT``: ``"2,4"`` -> [2, 4]; integers >= 2, none repeated; else a one-line error."""
    parts = [s.strip() for s in (spec or "").split(",")]
    if not spec or any(not (p.isascii() and p.isdigit()) or int(p) < 2 for p in parts):
        die(f"TRAIN_CONCAT={spec}: give how many training pairs are joined into one, integers of at least 2 "
            f"separated by commas (e.g. 2 or 2,4)")
    ks = [int(p) for p in parts]
    if len(set(ks)) != len(ks):
        die(f"TRAIN_CONCAT={spec}: {','.join(str(k) for k in sorted(set(ks)) if ks.count(k) > 1)} given twice")
    return ks


def training_groups(n: int, k: int, docs: Optional[Sequence[str]], rng: random.Random) -> List[List[int]]:
    """The groups of k pairs (0-based lines) joined for TRAIN_CONCAT: each pair with its next k - 1
    pairs of the same document, or with k - 1 other pairs drawn by ``rng`` without documents."""
    if docs is not None:
        return [run[i:i + k] for run in document_runs(docs) for i in range(len(run) - k + 1)]
    if n < k:
        return []
    return [[i] + [j + (j >= i) for j in rng.sample(range(n - 1), k - 1)] for i in range(n)]


def cmd_concat_train(args):
    ks = parse_train_ks(args.ks)
    src, tgt = read_lines(args.src), read_lines(args.tgt)
    if len(src) != len(tgt):
        die(f"{args.src} has {len(src)} lines but {args.tgt} has {len(tgt)}")
    docs = None
    if args.docs:
        docs = read_lines(args.docs)
        if len(docs) != len(src):
            die(f"{args.docs}: {len(docs)} document ids, but {args.src} has {len(src)} training pairs: "
                f"give one document id per training line")
    rng = random.Random(args.seed)
    out_src, out_tgt, groups = list(src), list(tgt), []
    record = {"ks": ks, "original": len(src), "documents": os.path.abspath(args.docs) if args.docs else None,
              "seed": None if docs is not None else args.seed, "k": {}}
    for k in ks:
        got = training_groups(len(src), k, docs, rng)
        out_src += [" ".join(src[i] for i in g) for g in got]
        out_tgt += [" ".join(tgt[i] for i in g) for g in got]
        groups += [" ".join(str(i + 1) for i in g) for g in got]
        record["k"][str(k)] = {"n": len(got)}
        if not got:
            print(f"TRAIN_CONCAT: no pair has {k - 1} kept pairs after it in its document: no joined pairs of {k}",
                  file=sys.stderr)
    record["total"] = len(out_src)
    write_lines(args.src_out, out_src)
    write_lines(args.tgt_out, out_tgt)
    write_lines(args.groups_out, groups)
    write_lines(args.record, [json.dumps(record, indent=1)])
    how = "consecutive pairs of one document" if docs is not None else f"random pairs (seed {args.seed})"
    print(f"concat-train: {len(src)} pairs and {len(out_src) - len(src)} joined ones ({how}: "
          + ", ".join(f"k = {k}: {c['n']}" for k, c in record["k"].items()) + ")")


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("concat-test", help="the test set as groups of k consecutive segments of one document "
                       "(CONCAT of lengths.sh)")
    p.add_argument("--src", required=True); p.add_argument("--ref", required=True)
    p.add_argument("--docs", help="one document id per test line (default: the file is one document)")
    p.add_argument("--ks", required=True, help="CONCAT, e.g. 1,2,4,8"); p.add_argument("--out", required=True)
    p.add_argument("--src-lang", required=True); p.add_argument("--tgt-lang", required=True)
    p.set_defaults(fn=cmd_concat_test)
    p = sub.add_parser("concat-train", help="the training pairs and their joins of k (TRAIN_CONCAT of the data step)")
    p.add_argument("--src", required=True); p.add_argument("--tgt", required=True)
    p.add_argument("--docs", help="one document id per training pair (default: random pairs)")
    p.add_argument("--ks", required=True, help="TRAIN_CONCAT, e.g. 2,4")
    p.add_argument("--seed", type=int, default=1, help="the draw of random pairs (without --docs)")
    p.add_argument("--src-out", required=True); p.add_argument("--tgt-out", required=True)
    p.add_argument("--groups-out", required=True, help="the 1-based lines of each joined pair")
    p.add_argument("--record", required=True, help="JSON: the joined pairs counted")
    p.set_defaults(fn=cmd_concat_train)
