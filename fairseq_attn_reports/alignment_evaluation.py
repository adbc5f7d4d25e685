"""What ``fairseq-attn-align`` does (:mod:`fairseq_attn_reports.cli.align` parses its arguments):
the inputs of a run or a checkpoint and data folder, the gold, the attention and eflomal
alignments of every subset, their AER, the choice on valid, the output folder written whole.
See docs/howto/alignment.md."""

import argparse
import json
import os
import shutil
import time
from typing import Dict, List, Optional, Sequence

from fairseq_attn_records import run_record
from fairseq_attn_records.alignment import AlignmentError, aer_scores, read_pharaoh, write_pharaoh
from fairseq_attn_records.output_files import replace_folder, write_json

SUBSETS = ("valid", "test")


class AlignInputError(ValueError):
    """Bad input: printed as one line."""


# ------------------------------------------------------------------ inputs

def evaluated_checkpoint(run: str, rec: Dict) -> str:
    """The checkpoint the run's test evaluation translated with (evaluate.sh: the average of the
    checkpoints it records), checked against the list of files that average was made from."""
    ev = (rec.get("evaluations") or {}).get("test")
    if not ev:
        raise AlignInputError(f"{run}: no test evaluation in its run record (evaluate.sh first), or give --checkpoint")
    with open(os.path.join(run, ev["dir"], "scores.json"), encoding="utf-8") as f:
        ck = json.load(f).get("checkpoint")
    sources = ck and ck + ".sources"
    if not ck or not os.path.isfile(ck) or not os.path.isfile(sources):
        raise AlignInputError(f"{run}: the checkpoint of its test evaluation ({ck}) is gone: give --checkpoint")
    with open(sources, encoding="utf-8") as f:
        made_of = sorted(os.path.basename(x) for x in f.read().split())
    if made_of != sorted(a["file"] for a in ev.get("averaged") or []):
        raise AlignInputError(f"{ck} now averages other checkpoints ({', '.join(made_of)}) than the test "
                              f"evaluation did: re-run evaluate.sh, or give --checkpoint")
    return ck


def run_inputs(run: str, args_checkpoint: Optional[str] = None) -> Dict:
    from .runs import Run

    try:
        rec = Run(run).record  # a record contradicting itself or its checkpoints is refused
    except FileNotFoundError as e:
        raise AlignInputError(str(e)) from None
    if rec is None:
        raise AlignInputError(f"{run}: no run record ({run_record.RECORD}); give --checkpoint and --data instead")
    if args_checkpoint:
        ck = args_checkpoint
    else:
        ck = evaluated_checkpoint(run, rec)
    return {"checkpoint": ck, "data": (rec.get("data") or {}).get("path"), "arch": rec.get("arch"),
            "run_id": rec.get("run_id")}


def read_lines(path: str) -> List[str]:
    if not os.path.isfile(path):
        raise AlignInputError(f"{path}: no such file (the data folder's raw/ holds the scored lines)")
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def gold_path(gold: str, data: str, subset: str) -> str:
    if gold == "bible":
        # the bible recipe's data folders: prepare.json says grc-en, raw/ holds the corpus step's gold
        rec_path = os.path.join(data, "prepare.json")
        pair = "no prepare.json"
        if os.path.isfile(rec_path):
            with open(rec_path, encoding="utf-8") as f:
                st = json.load(f).get("settings") or {}
            pair = f"{st.get('SRC')}-{st.get('TGT')}"
        if pair != "grc-en":
            raise AlignInputError(f"--gold bible: {data} is not the bible corpus ({pair}, not grc-en data of "
                                  f"recipes/bible_grc_en); give --gold FOLDER with SUBSET.align files")
        path = os.path.join(data, "raw", f"{subset}.align")
        if not os.path.isfile(path):
            raise AlignInputError(f"--gold bible: {path} is missing (data prepared before the corpus step wrote "
                                  f"gold alignments): re-run recipes/bible_grc_en/prepare.sh")
        return path
    if not os.path.isdir(gold):
        raise AlignInputError(f"--gold {gold}: give 'bible' or a folder holding SUBSET.align")
    return os.path.join(gold, f"{subset}.align")


def parse_subsets(spec: str) -> List[str]:
    subs = [s.strip() for s in spec.split(",") if s.strip()]
    if not subs or any(s not in SUBSETS for s in subs) or len(set(subs)) != len(subs):
        raise AlignInputError(f"--subsets {spec}: one or both of valid,test, each once")
    return subs


def parse_layers(spec: str, n_layers: int) -> List[int]:
    if spec == "all":
        return list(range(n_layers))
    try:
        layers = [int(x) for x in spec.split(",")]
    except ValueError:
        raise AlignInputError(f"--layers {spec}: 'all' or comma-separated 0-based layer numbers") from None
    bad = [x for x in layers if not 0 <= x < n_layers]
    if bad or len(set(layers)) != len(layers):
        raise AlignInputError(f"--layers {spec}: the model has {n_layers} decoder layers (0-{n_layers - 1}), each once")
    return layers


# ------------------------------------------------------------------ attention

def load_model(checkpoint: str, data: str, user_dir: Optional[str]):
    # the plugin first (safe loading; registers the model; quiets fairseq's import: quiet_imports)
    from fairseq_attn_plugins import checkpoint_safety  # noqa: F401
    from fairseq import checkpoint_utils, utils

    if user_dir:
        utils.import_user_module(argparse.Namespace(user_dir=user_dir))
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides={"data": data})
    return models[0].cpu().float().eval(), task


def attention_alignments(model, task, subset: str, src_lines: Sequence[str], tgt_lines: Sequence[str],
                         layers: Sequence[int], per_head: bool) -> Dict[str, List]:
    """{"METHOD.LAYER" (and "METHOD.LAYERhH"): [links per sentence]} of one subset."""
    import torch

    from fairseq_attn_plugins.alignment.attention import METHODS, teacher_forced_attention, word_links, word_matrix
    from fairseq_attn_plugins.alignment.words import word_of_tokens

    task.load_dataset(subset)
    ds = task.dataset(subset)
    if len(ds) != len(src_lines):
        raise AlignInputError(f"{subset}: the data folder's binarised subset has {len(ds)} pairs but its raw "
                              f"lines {len(src_lines)}")
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    out: Dict[str, List] = {}
    for n in range(len(ds)):
        item = ds[n]
        src, tgt = item["source"].long(), item["target"].long()
        attn = teacher_forced_attention(model, src, tgt, tgt_dict.eos())  # (L, H, T, S)
        src_words = word_of_tokens([src_dict[i] for i in src[:-1].tolist()], src_lines[n])
        tgt_words = word_of_tokens([tgt_dict[i] for i in tgt[:-1].tolist()], tgt_lines[n])
        for layer in layers:
            names = [str(layer)] + ([f"{layer}h{h}" for h in range(attn.size(1))] if per_head else [])
            maps = torch.cat([attn[layer].mean(0, keepdim=True), attn[layer]]) if per_head else attn[layer].mean(0, keepdim=True)
            for method in METHODS:
                matrices = word_matrix(maps, src_words, tgt_words, method)  # every map at once
                for name, m in zip(names, matrices):
                    out.setdefault(f"{method}.{name}", []).append(word_links(m))
    return out


# ------------------------------------------------------------------ main

def align(args) -> Dict:
    run = run_inputs(args.run, args.checkpoint) if args.run else {}
    checkpoint = args.checkpoint or run.get("checkpoint")
    data = args.data or run.get("data")
    if not data:
        raise AlignInputError("give a run folder or --data")
    if not os.path.isdir(data):
        raise AlignInputError(f"--data {data}: no such data folder")
    if not checkpoint and not args.eflomal:
        raise AlignInputError("give a run folder or --checkpoint (or --eflomal for eflomal alone)")
    if checkpoint and not os.path.isfile(checkpoint):
        raise AlignInputError(f"checkpoint {checkpoint}: no such file")
    out = args.out or (os.path.join(args.run, "align") if args.run else None)
    if not out:
        raise AlignInputError("give --out (no run folder to write into)")
    if os.path.exists(out) and not args.yes:
        raise AlignInputError(f"--out {out} exists: give another --out, or --yes to replace it")
    subsets = parse_subsets(args.subsets)
    langs = data_langs(data)
    gold, lines, gold_files = {}, {}, {}
    for subset in subsets:
        src = read_lines(os.path.join(data, "raw", f"{subset}.{langs[0]}"))
        tgt = read_lines(os.path.join(data, "raw", f"{subset}.{langs[1]}"))
        path = gold_path(args.gold, data, subset)
        try:
            gold[subset] = read_pharaoh(path, src, tgt)
        except AlignmentError as e:
            raise AlignInputError(str(e)) from None
        lines[subset] = (src, tgt)
        gold_files[subset] = {"path": os.path.realpath(path), "sha256": run_record.file_sha256(path),
                              "source": os.path.realpath(os.path.join(data, "raw", f"{subset}.{langs[0]}")),
                              "reference_sha256": run_record.file_sha256(os.path.join(data, "raw", f"{subset}.{langs[1]}"))}
    result = {"format": 1, "data": os.path.realpath(data), "gold": args.gold, "gold_files": gold_files,
              "subsets": subsets, "scores": {}, "unit": "percent; AER = 1 - F1 (every gold link sure)"}
    if run:
        result.update(run=os.path.realpath(args.run), arch=run.get("arch"), run_id=run.get("run_id"))
    predicted: Dict[str, Dict[str, List]] = {s: {} for s in subsets}
    started = time.time()
    if checkpoint:
        if args.threads < 1:
            raise AlignInputError(f"--threads {args.threads}: a positive number")
        import torch

        torch.set_num_threads(args.threads)
        model, task = load_model(checkpoint, data, args.user_dir)
        from fairseq_attn_plugins.alignment.attention import no_cross_attention_reason

        why = no_cross_attention_reason(model)
        if why:
            raise AlignInputError(f"{checkpoint}: no cross-attention to read: {why}")
        layers = parse_layers(args.layers, len(model.decoder.layers))
        result.update(checkpoint=os.path.realpath(checkpoint), layers=layers, per_head=args.per_head)
        for subset in subsets:
            predicted[subset].update(attention_alignments(model, task, subset, *lines[subset], layers, args.per_head))
        result["attention_seconds"] = round(time.time() - started, 1)
    if args.eflomal:
        from fairseq_attn_plugins.alignment.statistical import eflomal_alignments

        t0 = time.time()
        train = train_lines(data, langs)
        for subset in subsets:
            for name, links in eflomal_alignments(*train, *lines[subset]).items():
                predicted[subset][f"eflomal.{name}"] = links
        result["eflomal_seconds"] = round(time.time() - t0, 1)
    for subset in subsets:  # a reference that knows only positions
        predicted[subset]["diagonal"] = [diagonal_links(len(s.split()), len(t.split())) for s, t in zip(*lines[subset])]
        result["scores"][subset] = {name: aer_scores(links, gold[subset]) for name, links in predicted[subset].items()}
    result["chosen"] = choose(result["scores"], subsets)
    write_out(out, result, predicted, args.yes)
    return result


def diagonal_links(n_src: int, n_tgt: int):
    """Target word j linked to source word round(j * n_src / n_tgt): what positions alone give."""
    return {(min(n_src - 1, round(j * n_src / n_tgt)), j) for j in range(n_tgt)} if n_src else set()


def choose(scores: Dict, subsets: Sequence[str]) -> Dict:
    """The attention alignment (method and layer, heads averaged) of lowest AER on the first
    subset (valid), with its figures on every subset; eflomal's symmetrised row beside it."""
    first = scores[subsets[0]]
    names = [k for k in first if k.split(".")[0] in ("naive", "shift") and "h" not in k.split(".")[1]]
    out = {}
    if names:
        best = min(names, key=lambda k: (first[k]["aer"], k))
        method, layer = best.split(".")
        out["attention"] = {"name": best, "method": method, "layer": int(layer), "chosen_on": subsets[0],
                            **{s: scores[s][best] for s in subsets}}
    if "eflomal.grow-diag-final-and" in first:
        out["eflomal"] = {"name": "eflomal.grow-diag-final-and",
                          **{s: scores[s]["eflomal.grow-diag-final-and"] for s in subsets}}
    return out


def data_langs(data: str):
    """(source, target) language of a data folder: its dict.SRC.txt / dict.TGT.txt and
    prepare.json's SRC/TGT (the recipes'), else the two dictionaries' names."""
    rec = os.path.join(data, "prepare.json")
    if os.path.isfile(rec):
        with open(rec, encoding="utf-8") as f:
            st = json.load(f).get("settings") or {}
        if st.get("SRC") and st.get("TGT"):
            return st["SRC"], st["TGT"]
    dicts = sorted(n[5:-4] for n in os.listdir(data) if n.startswith("dict.") and n.endswith(".txt"))
    pairs = [n.split(".")[1].split("-") for n in os.listdir(data) if n.startswith("test.") and n.endswith(".idx")]
    if pairs and len(pairs[0]) == 2 and sorted(pairs[0]) == dicts:
        return pairs[0][0], pairs[0][1]
    raise AlignInputError(f"{data}: cannot tell its source and target language (no prepare.json, no test.SRC-TGT files)")


def train_lines(data: str, langs) -> tuple:
    """The training pairs of the data folder as words: the binarised text, subwords joined."""
    from fairseq.data import Dictionary, data_utils

    import html

    out = []
    for lang in langs:
        d = Dictionary.load(os.path.join(data, f"dict.{lang}.txt"))
        ds = data_utils.load_indexed_dataset(os.path.join(data, f"train.{langs[0]}-{langs[1]}.{lang}"), d)
        if ds is None:
            raise AlignInputError(f"{data}: no binarised training pairs train.{langs[0]}-{langs[1]}.{lang}")
        words = []
        for i in range(len(ds)):
            text = d.string(ds[i][:-1], "subword_nmt")
            if "\u2581" in text:  # sentencepiece pieces
                text = text.replace(" ", "").replace("\u2581", " ")
            words.append(" ".join(html.unescape(text).split()))
        out.append(words)
    return tuple(out)


def write_out(out: str, result: Dict, predicted: Dict, replace: bool) -> None:
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for subset, systems in predicted.items():
        os.makedirs(os.path.join(tmp, subset), exist_ok=True)
        for name, links in systems.items():
            write_pharaoh(os.path.join(tmp, subset, f"alignments.{name}.txt"), links)
    write_json(os.path.join(tmp, "aer.json"), result, indent=1)
    if os.path.exists(out) and not replace:
        raise AlignInputError(f"--out {out} exists: give --yes to replace it")
    replace_folder(tmp, out)


def summary(result: Dict) -> str:
    lines = []
    for subset, rows in result["scores"].items():
        for name, s in rows.items():
            lines.append(f"{subset:5} {name:32} AER {s['aer']:6.2f}  P {s['precision']:6.2f}  R {s['recall']:6.2f}")
    ch = result["chosen"].get("attention")
    if ch:
        test = ch.get("test") or {}
        lines.append(f"chosen on {ch['chosen_on']}: {ch['method']} layer {ch['layer']}"
                     + (f"; test AER {test['aer']:.2f} (P {test['precision']:.2f}, R {test['recall']:.2f})" if test else ""))
    return "\n".join(lines)
