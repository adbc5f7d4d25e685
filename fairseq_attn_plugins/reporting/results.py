"""Finished runs collected into a table like Table 2 of
the CSAN paper (Yang et al., 2019): system, #params, training speed, BLEU,
delta over the baseline, and significance marks (``*`` p < 0.05, ``**`` p < 0.01
in both paired bootstrap resampling and approximate randomisation, computed by
sacreBLEU, for systems better than the baseline only; see
:func:`fairseq_attn_plugins.reporting.significance.system_mark`).

A *run directory* (written by the demo and by ``recipes/*/train.sh`` +
``evaluate.sh``) holds:

* ``train.log`` -- fairseq-train's log (``--log-format json``): parameter count,
  per-epoch training speed and losses;
* ``hyp.txt``   -- detokenised test translations, one per line, in test-set order;
* ``scores.json`` (recipes' evaluate.sh, optional) -- the tokenised BLEU the papers report
  (compound-split for En-De) and the number of training pairs, shown as two more columns.

The command line is ``fairseq-attn-results`` (:mod:`fairseq_attn_plugins.cli.results`).

Several seeds (run directories ``<name>_seed<N>``, as ``SEEDS="1 2 3"`` writes them):
one row per system with BLEU as mean ± sample std (n-1) and a mark only when every
seed pair against the baseline is significant (:mod:`fairseq_attn_plugins.reporting.seeds`).
``--curves FILE.png``: learning curves of every run (:mod:`fairseq_attn_plugins.reporting.curves`).
"""

import json
import os
from typing import Dict, Optional, Sequence, Tuple

from .curves import read_log_records
from .significance import paired_tests, read_lines, system_mark


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


def read_scores(run_dir: str) -> Dict:
    """The paper-comparable numbers of a recipe run (``scores.json``), or {}."""
    path = os.path.join(run_dir, "scores.json")
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        scores = json.load(f)
    return {k: scores.get(k) for k in ("tokenized_bleu", "tokenized_bleu_method", "train_pairs",
                                       "train_data_partial")}


def collect(runs: Sequence[Tuple[str, str]], ref_path: str, tokenize: str = "13a",
            bs_samples: int = 1000, ar_trials: int = 10000) -> Dict:
    """``runs``: (name, run_dir) pairs, baseline first. Returns the table as a dict."""
    for name, d in runs:
        for f in ("train.log", "hyp.txt"):
            if not os.path.isfile(os.path.join(d, f)):
                raise FileNotFoundError(f"run {name!r}: {os.path.join(d, f)} is missing "
                                        f"(train and evaluate the run first)")
    refs = read_lines(ref_path)
    systems = [(name, read_lines(os.path.join(d, "hyp.txt"))) for name, d in runs]
    sig = paired_tests(refs, systems, tokenize, bs_samples, ar_trials)
    rows = []
    base_bleu = sig["systems"][0]["bleu"]
    for (name, d), s in zip(runs, sig["systems"]):
        log = parse_train_log(os.path.join(d, "train.log"))
        rows.append({
            "system": name, "run_dir": d, "params": log["params"], "train_wps": log["train_wps"],
            "train_ups": log["train_ups"], "num_updates": log["num_updates"], "bleu": s["bleu"],
            "delta": None if name == runs[0][0] else s["bleu"] - base_bleu,
            "p_bootstrap": s.get("p_bootstrap"), "p_ar": s.get("p_ar"),
            "mark": system_mark(s, base_bleu),  # better than the baseline only
            "epochs": log["epochs"],
        })
        extra = read_scores(d)
        rows[-1].update(tok_bleu=extra.get("tokenized_bleu"), tok_bleu_method=extra.get("tokenized_bleu_method"),
                        train_pairs=extra.get("train_pairs"), train_data_partial=extra.get("train_data_partial"))
    return {"baseline": runs[0][0], "ref": ref_path, "signature": sig["signature"], "rows": rows}


def fmt_params(n: Optional[int]) -> str:
    if n is None:
        return "?"
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}K"


def format_markdown(table: Dict) -> str:
    rows = table["rows"]
    # recipe runs (scores.json): also the tokenised BLEU the papers report and the training pairs
    tok = any(r.get("tok_bleu") is not None for r in rows)
    pairs = any(r.get("train_pairs") is not None for r in rows)
    extra_head = (" Tok. BLEU |" if tok else "") + (" Train pairs |" if pairs else "")
    extra_rule = ("---:|" if tok else "") + ("---:|" if pairs else "")
    out = ["| # | System | #Params | Speed (tok/s) | Speed (upd/s) | BLEU | Δ | p (bs) | p (ar) |" + extra_head,
           "|---|---|---:|---:|---:|---:|---:|---:|---:|" + extra_rule]
    for i, r in enumerate(rows, 1):
        delta = "-" if r["delta"] is None else f"{r['delta']:+.2f}"
        p = lambda v: "-" if v is None else f"{v:.4f}"
        sp = lambda v, f: "?" if v is None else format(v, f)
        extra = ""
        if tok:
            extra += f" {sp(r.get('tok_bleu'), '.2f')} |"
        if pairs:
            extra += f" {sp(r.get('train_pairs'), ',d')}{' (partial)' if r.get('train_data_partial') else ''} |"
        out.append(f"| {i} | {r['system']} | {fmt_params(r['params'])} | {sp(r['train_wps'], '.0f')} | "
                   f"{sp(r['train_ups'], '.2f')} | {r['bleu']:.2f}{r['mark']} | {delta} | "
                   f"{p(r['p_bootstrap'])} | {p(r['p_ar'])} |" + extra)
    out.append("")
    out.append(f"Baseline: {table['baseline']}. `*` / `**`: better than the baseline with "
               "p < 0.05 / p < 0.01 in both paired bootstrap resampling and paired approximate "
               "randomisation (sacreBLEU).")
    out.append("BLEU: detokenised sacreBLEU (signatures below).")
    if tok:
        methods = sorted({r["tok_bleu_method"] for r in rows if r.get("tok_bleu_method")})
        out.append("Tok. BLEU: tokenised BLEU as the papers report it (" + "; ".join(methods) + "); "
                   "not comparable across tokenisations.")
    if pairs:
        counts = {r.get("train_pairs") for r in rows}
        out.append("Train pairs: sentence pairs after cleaning" +
                   (". The runs were trained on different amounts of data." if len(counts) > 1 else "."))
    for test, sigs in table["signature"].items():
        for s in sigs.values():
            out.append(f"sacreBLEU signature ({test}): `{s}`")
    return "\n".join(out)
