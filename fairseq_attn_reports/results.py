"""Finished runs collected into a table that reads like a paper's (Table 2 of the CSAN
paper, Yang et al., 2019, with today's metrics): system, the architecture and active pieces
its run record says it trained (``?`` without a record), #params, training speed, BLEU,
chrF++ and (with ``COMET_MODEL``) COMET, each with its delta over the baseline and its
significance mark (``*`` p < 0.05, ``**`` p < 0.01 in both paired bootstrap resampling
and approximate randomisation, the same resamples for every metric, for systems better
than the baseline on that metric only; see :func:`fairseq_attn_records.metrics.metric_mark`); the legend
says which test and threshold made the marks, the signatures follow.

A *run directory* (written by the demo and by ``recipes/*/train.sh`` +
``evaluate.sh``) holds:

* ``train.log`` -- fairseq-train's log (``--log-format json``): parameter count,
  per-epoch training speed and losses;
* ``run.json`` (recipes) -- the run record (:mod:`fairseq_attn_records.run_record`): what the
  run is, and one evaluation per subset (``test/hyp.txt``, ``valid/hyp.txt``, their reference
  and scores: the tokenised BLEU the papers report and the number of training pairs are
  shown as two more columns); the translations scored are those of the subset evaluated
  against ``--ref`` (by content);
* otherwise ``hyp.txt`` -- detokenised translations, one per line (and, from older recipes,
  ``scores.json``, whose recorded reference must be ``--ref``).

The same run given twice is an error; runs trained for other numbers of updates, on other
data-bins or with other effective batches are marked ``†`` with a note
(:mod:`fairseq_attn_reports.runs`).

The command line is ``fairseq-attn-results`` (:mod:`fairseq_attn_reports.cli.results`).

Several seeds (run directories ``<name>_seed<N>``, as ``SEEDS="1 2 3"`` writes them):
one row per system with BLEU as mean ± sample std (n-1) and a mark only when every
seed pair against the baseline is significant (:mod:`fairseq_attn_reports.seeds`).
``--curves FILE.png``: learning curves of every run (:mod:`fairseq_attn_reports.curves`).
"""

import os
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_attn_records import metrics as M
from fairseq_attn_records import run_record
from fairseq_attn_records.text_inputs import check_aligned, describe_empty, read_text_lines

from .curves import read_log_records
from .runs import (MODEL_HEADER, Run, comparability, load_runs, model_cell, model_legend, stale_notes,
                   trained_as)
from .significance import fmt_ratio, legend_lines, paired_tests, system_mark


def parse_train_log(path: str) -> Dict:
    """Parameters, speed and per-epoch losses from a fairseq-train json log.

    A resumed run appends to the same log; the latest value of each epoch wins.
    """
    params = None
    epochs: Dict[int, Dict] = {}
    for kind, stats in read_log_records(path):  # the parser shared with the learning curves
        if kind == "params":
            params = stats["params"]
        if kind not in ("train", "valid"):
            continue
        ep = epochs.setdefault(int(stats["epoch"]), {"epoch": int(stats["epoch"])})
        if kind == "train":
            ep.update(train_loss=float(stats["train_loss"]), train_wps=float(stats["train_wps"]),
                      train_ups=float(stats["train_ups"]), num_updates=int(float(stats["train_num_updates"])))
        else:
            ep.update(valid_loss=float(stats["valid_loss"]),
                      valid_num_updates=int(float(stats["valid_num_updates"])))
    curve = [epochs[k] for k in sorted(epochs)]
    speeds = [e for e in curve if "train_wps" in e]
    return {
        "params": params,
        "epochs": curve,
        "num_updates": max((e.get("num_updates", 0) for e in curve), default=0),
        # mean over epochs of fairseq's own per-epoch averages
        "train_wps": sum(e["train_wps"] for e in speeds) / len(speeds) if speeds else None,
        "train_ups": sum(e["train_ups"] for e in speeds) / len(speeds) if speeds else None,
    }


def train_time(run: Run) -> Optional[Dict]:
    """The wall time of the run's trainings (:func:`fairseq_attn_records.run_record.training_time`),
    or None without a record."""
    return None if run.record is None else run_record.training_time(run.record)


def fmt_train_time(t: Optional[Dict]) -> str:
    """``42 min``, ``2.3 h``; ``(3 starts)`` when the run was resumed; ``?`` without a record."""
    if t is None or not t["trainings"]:
        return "?"
    minutes = t["seconds"] / 60
    cell = f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"
    return cell + (f" ({t['trainings']} starts)" if t["trainings"] > 1 else "")


TRAIN_TIME_LEGEND = ("Train time: wall clock of the run's trainings, from its record (a start killed part-way "
                     "counts until its last checkpoint); as loaded as the machine was, so not a speed comparison.")


def paper_scores(run: Run, evaluation: Dict) -> Dict:
    """The paper-comparable numbers of a recipe run: tokenised BLEU (from the evaluation in its
    run record, or from a ``scores.json`` of a run evaluated before per-subset outputs) and the
    number of training pairs; {} for other runs."""
    metrics = evaluation.get("scores")
    if isinstance(metrics, dict):  # the run record's evaluation: scores keyed by metric name
        tok = metrics.get("tokenized_bleu") or {}
        pairs = ((run.record or {}).get("data") or {}).get("train_pairs") or {}
        joined = (pairs.get("concat") or {}).get("total")  # TRAIN_CONCAT: the originals and their joins
        return {"tokenized_bleu": tok.get("score"), "tokenized_bleu_method": tok.get("method"),
                "train_pairs": joined if joined is not None else pairs.get("clean"),
                "train_pairs_original": pairs.get("clean") if joined is not None else None,
                "train_data_partial": pairs.get("partial")}
    return {k: evaluation.get(k) for k in ("tokenized_bleu", "tokenized_bleu_method", "train_pairs",
                                           "train_pairs_original", "train_data_partial")}


def fmt_train_pairs(row: Dict) -> str:
    """``4,361``; with joined pairs ``12,207 (4,361 + joined)``; ``(partial)`` when parts of the
    official data were left out."""
    n, original = row.get("train_pairs"), row.get("train_pairs_original")
    cell = "?" if n is None else f"{n:,d}" + ("" if original is None else f" ({original:,d} + joined)")
    return cell + (" (partial)" if row.get("train_data_partial") else "")


def read_outputs(named: Sequence[Tuple[str, str]], ref_path: str, src_path: Optional[str] = None,
                 notes: Optional[list] = None) -> Tuple[list, List[list], Optional[list]]:
    """(reference lines, [hypothesis lines of each (name, hyp path)], source lines or None),
    every file checked (:mod:`fairseq_attn_records.text_inputs`) before any scoring; notes on empty translations
    are appended to ``notes``."""
    refs = read_text_lines(ref_path, "reference")
    sources = None
    if src_path:
        sources = read_text_lines(src_path, "source")
        check_aligned(ref_path, refs, src_path, sources, what="source sentence")
    hyps = []
    for _, path in named:
        hyps.append(read_text_lines(path, "system output"))
        check_aligned(ref_path, refs, path, hyps[-1])
        if notes is not None and describe_empty(path, hyps[-1]):
            notes.append(describe_empty(path, hyps[-1]))
    return refs, hyps, sources


def collect(runs: Sequence[Tuple[str, str]], ref_path: str, tokenize: str = "13a",
            bs_samples: int = 1000, ar_trials: int = 10000, metrics: Sequence[str] = M.DEFAULT_METRICS,
            comet=None, src_path: Optional[str] = None, scorers=None) -> Dict:
    """``runs``: (name, run_dir) pairs, baseline first; ``metrics``, ``comet`` and ``scorers``
    as :func:`.significance.paired_tests` takes them. Returns the table as a dict: per row
    BLEU's fields and, for every metric, ``scores`` / ``deltas`` / ``marks``.

    The same run given twice is an error; each run's translations are those of the subset
    evaluated against ``ref_path`` (:meth:`Run.hyp_for`); runs trained differently (updates,
    data-bin, effective batch) are flagged (``comparability``, rows' ``trained_differently``)."""
    infos = load_runs([d for _, d in runs])
    for name, d in runs:
        if not os.path.isfile(os.path.join(d, "train.log")):
            raise FileNotFoundError(f"run {name!r}: {os.path.join(d, 'train.log')} is missing "
                                    f"(train and evaluate the run first)")
    outputs = [info.hyp_for(ref_path) for info in infos]
    notes: list = stale_notes([name for name, _ in runs], [ev for _, ev in outputs])
    refs, hyps, sources = read_outputs([(name, hyp) for (name, _), (hyp, _) in zip(runs, outputs)],
                                       ref_path, src_path, notes)
    systems = [(name, h) for (name, _), h in zip(runs, hyps)]
    sig = paired_tests(refs, systems, tokenize, bs_samples, ar_trials, metrics=metrics, comet=comet,
                       sources=sources, scorers=scorers)
    rows, trained = [], []
    for (name, d), scored, info, (hyp, ev) in zip(runs, score_rows(sig), infos, outputs):
        log = parse_train_log(os.path.join(d, "train.log"))
        trained.append(trained_as(info, ev, log["num_updates"]))
        rows.append({
            "system": name, "run_dir": d, "hyp": hyp, "subset": ev.get("subset"),
            "trained_model": info.trained_model(),  # from the run record, never from the name
            "params": log["params"], "train_wps": log["train_wps"],
            "train_ups": log["train_ups"], "num_updates": log["num_updates"],
            "train_time": train_time(info), **scored,
            "epochs": log["epochs"], "trained": trained[-1], "stale": ev.get("stale"),
        })
        extra = paper_scores(info, ev)
        rows[-1].update(tok_bleu=extra.get("tokenized_bleu"), tok_bleu_method=extra.get("tokenized_bleu_method"),
                        train_pairs=extra.get("train_pairs"), train_pairs_original=extra.get("train_pairs_original"),
                        train_data_partial=extra.get("train_data_partial"))
    mark_trained_differently(rows, trained)
    return {"baseline": runs[0][0], "ref": ref_path, "src": src_path, "metrics": sig["metrics"],
            "labels": sig["labels"], "signature": sig["signature"], "tokenize": tokenize, "bs_samples": bs_samples,
            "ar_trials": ar_trials, "notes": notes, "rows": rows,
            "comparability": comparability([n for n, _ in runs], trained)}


def score_rows(sig: Dict) -> List[Dict]:
    """The scored fields of each row of a one-seed table from :func:`.significance.paired_tests`'s
    result (baseline first): BLEU's (``bleu``, ``delta``, p-values, ``mark``), the length ratio, and
    per metric ``scores`` / ``deltas`` / ``marks`` (and a segment metric's scores per sentence).
    The table and the re-scoring of a committed study (:mod:`.study_bundle`) both read them here."""
    base = sig["systems"][0]
    out = []
    for s in sig["systems"]:
        is_base = s is base
        row = {
            "bleu": s["bleu"], "delta": None if is_base else s["bleu"] - base["bleu"],
            "p_bootstrap": s.get("p_bootstrap"), "p_ar": s.get("p_ar"),
            "length_ratio": s["length_ratio"], "sys_len": s["sys_len"], "ref_len": s["ref_len"],
            "mark": system_mark(s, base["bleu"]),  # better than the baseline only
            "scores": s["scores"],
            "deltas": {k: None if is_base else s["scores"][k]["score"] - base["scores"][k]["score"]
                       for k in sig["metrics"]},
            "marks": {k: "" if is_base else M.metric_mark(k, s["scores"][k], base["scores"][k]["score"])
                      for k in sig["metrics"]},
        }
        for key in sig["metrics"]:  # a segment metric's scores per sentence
            if f"{key}_segments" in s:
                row[f"{key}_segments"] = s[f"{key}_segments"]
        out.append(row)
    return out


TRAINED_FIELDS = (("updates", "updates"), ("data_id", "data-bin"), ("tokens_per_update_max", "effective batch"))


def mark_trained_differently(rows: Sequence[Dict], trained: Sequence[Dict]) -> None:
    """Each row's ``trained_differently``: what (known on both sides) differs from the baseline's."""
    base = trained[0]
    for r, t in zip(rows, trained):
        r["trained_differently"] = [what for key, what in TRAINED_FIELDS
                                    if None not in (t.get(key), base.get(key)) and t[key] != base[key]]


def comparability_lines(table: Dict) -> List[str]:
    """The table's note on runs trained differently (``†`` marks their rows)."""
    notes = table.get("comparability") or []
    if not notes:
        return []
    return ["† Trained differently from the baseline; the difference in BLEU is not only the "
            "method's: " + "; ".join(notes) + "."]


def fmt_params(n: Optional[int]) -> str:
    if n is None:
        return "?"
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}K"


def format_markdown(table: Dict) -> str:
    rows = table["rows"]
    keys = table.get("metrics", ["bleu"])
    labels = table.get("labels", {"bleu": "BLEU"})
    # recipe runs (scores.json): also the tokenised BLEU the papers report and the training pairs
    tok = any(r.get("tok_bleu") is not None for r in rows)
    pairs = any(r.get("train_pairs") is not None for r in rows)
    extra_head = (" Tok. BLEU |" if tok else "") + (" Train pairs |" if pairs else "")
    extra_rule = ("---:|" if tok else "") + ("---:|" if pairs else "")
    out = [f"| # | System | {MODEL_HEADER} | #Params | Speed (tok/s) | Speed (upd/s) | Train time |"
           + "".join(f" {labels[k]} | Δ |" for k in keys) + " Len. ratio |" + extra_head,
           "|---|---|---|---:|---:|---:|---:|" + "---:|---:|" * len(keys) + "---:|" + extra_rule]
    models = [model_cell(r.get("trained_model")) for r in rows]
    for i, r in enumerate(rows, 1):
        sp = lambda v, f: "?" if v is None else format(v, f)
        cells = ""
        for k in keys:
            nd = M.digits(k)
            d = r["deltas"][k]
            cells += f" {r['scores'][k]['score']:.{nd}f}{r['marks'][k]} | {'-' if d is None else f'{d:+.{nd}f}'} |"
        cells += f" {fmt_ratio(r.get('length_ratio'))} |"
        extra = ""
        if tok:
            extra += f" {sp(r.get('tok_bleu'), '.2f')} |"
        if pairs:
            extra += f" {fmt_train_pairs(r)} |"
        dagger = (" †" if r.get("trained_differently") else "") + (" ‡" if r.get("stale") else "")
        out.append(f"| {i} | {r['system']}{dagger} | {models[i - 1]} | {fmt_params(r['params'])} | "
                   f"{sp(r['train_wps'], '.0f')} | "
                   f"{sp(r['train_ups'], '.2f')} | {fmt_train_time(r.get('train_time'))} |" + cells + extra)
    out.append("")
    legend = legend_lines({"systems": [{"name": table["baseline"]}], "metrics": keys,
                           "bs_samples": table.get("bs_samples", 1000), "ar_trials": table.get("ar_trials", 10000),
                           "signature": {}})
    out += legend
    out.append(model_legend(models))
    out.append(TRAIN_TIME_LEGEND)
    out.append("BLEU and chrF++: detokenised sacreBLEU; COMET: mean segment score; p-values in --json "
               "and in fairseq-attn-significance (signatures below).")
    if tok:
        methods = sorted({r["tok_bleu_method"] for r in rows if r.get("tok_bleu_method")})
        out.append("Tok. BLEU: tokenised BLEU as the papers report it (" + "; ".join(methods) + "); "
                   "not comparable across tokenisations.")
    if pairs:
        counts = {r.get("train_pairs") for r in rows}
        out.append("Train pairs: the sentence pairs trained on, after cleaning (`+ joined`: with the pairs "
                   "TRAIN_CONCAT joined from them)" +
                   (". The runs were trained on different amounts of data." if len(counts) > 1 else "."))
    out += comparability_lines(table)
    out += signature_lines(table["signature"])
    out += table.get("notes", [])
    return "\n".join(out)


def signature_lines(signature: Dict) -> list:
    return [f"{metric} signature ({test}): `{s}`" for test, sigs in (signature or {}).items()
            for metric, s in sigs.items()]
