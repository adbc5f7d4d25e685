"""The long-input study's training lengths and learning curves (lengths.sh's CONVERGE and CURVE).

* :func:`training_table`: per system and training condition, what its runs trained (updates, epochs,
  pairs, original pairs and tokens seen, from each run record's ``epoch`` / ``seen``: see
  :mod:`fairseq_attn_records.training_seen`), what stopped them (``patience`` or the cap of updates)
  and the cap: mean ± sample std over seeds, and each seed's updates.
* :func:`curve_table`: per system, condition and update of CURVE, the scores of the single checkpoint
  of that update (its run record's evaluation ``curve/u<U>/<subset>``, the hypotheses checked against
  the sha256 it scored) on k = 1 and the largest k: sacreBLEU's BLEU, chrF++ and length ratio
  (``sys_len / ref_len``), mean ± sample std over seeds, every seed's value kept; with the epochs and
  original pairs seen at that update. A run without that checkpoint (stopped before it, or not kept)
  has no value there, said in ``missing``.
* :func:`ranking_table`: per condition and k, the systems in the order of their mean BLEU at each
  point, and the first point from which no two systems change order (the pairs compared where both
  have a value), so that a reader sees whether a ranking is a property of the training length.
"""

import itertools
import os
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_attn_records import run_record
from fairseq_attn_records.training_seen import seen_at

from .curves import mean_std, patience_stop, validation_losses

Runs = Sequence[Tuple[str, str, Sequence[str]]]  # (condition label, system name, run dirs of its seeds)


def _stat(values: Sequence[Optional[float]]) -> Optional[Dict]:
    vals = [v for v in values if v is not None]
    if not vals or len(vals) != len(values):
        return None
    mean, std = mean_std(vals)
    return {"mean": mean, "std": std, "per_seed": list(vals)}


def run_training(run_dir: str) -> Dict:
    """One run's training length: updates, the stop, the cap, epoch and what it has seen."""
    rec = run_record.load(run_dir)
    if rec is None:
        raise ValueError(f"{run_dir}: no run record (run.json): train it first")
    last = (rec.get("trainings") or [{}])[-1]
    updates = rec.get("num_updates")
    seen = rec.get("seen") or (seen_at(rec.get("epoch"), updates) if updates is not None else None)
    stopped = last.get("stopped") or ("cap" if updates is not None and updates == last.get("max_update") else None)
    return {"run_dir": run_dir, "updates": updates, "cap": last.get("max_update"),
            "stopped": past_stop(run_dir, rec) or stopped, "epoch": rec.get("epoch"), "seen": seen}


def past_stop(run_dir: str, rec: Dict) -> Optional[str]:
    """``"past its stop (patience P: U)"`` when a patience the run was trained with would have stopped it at
    update U before the updates it holds (its train.log's validation losses): a run trained on past its stop
    (continued with a higher patience, or a higher cap) is never called converged; else None."""
    updates, log = rec.get("num_updates"), os.path.join(run_dir, "train.log")
    if not updates or not os.path.isfile(log):
        return None
    losses = validation_losses(log, updates)
    for p in run_record.trained_patiences(rec):
        stop = patience_stop(losses, p) if p > 0 else None
        if stop is not None and stop < updates:
            return f"past its stop (patience {p}: {stop:,})"
    return None


def training_table(runs: Runs) -> List[Dict]:
    rows = []
    for cond, name, dirs in runs:
        per = [run_training(d) for d in dirs]
        row = {"condition": cond, "system": name, "run_dirs": [p["run_dir"] for p in per],
               "cap": sorted({p["cap"] for p in per if p["cap"] is not None}),
               "stopped": [p["stopped"] for p in per], "updates": _stat([p["updates"] for p in per])}
        for key in ("epochs", "pairs", "original_pairs", "src_tokens", "tgt_tokens"):
            row[key] = _stat([(p["seen"] or {}).get(key) for p in per])
        rows.append(row)
    return rows


def _fmt(stat: Optional[Dict], digits: int = 2, big: bool = False) -> str:
    if stat is None:
        return "-"
    if big:
        return f"{stat['mean']:,.0f}" + (f" ± {stat['std']:,.0f}" if len(stat["per_seed"]) > 1 else "")
    return f"{stat['mean']:.{digits}f}" + (f" ± {stat['std']:.{digits}f}" if len(stat["per_seed"]) > 1 else "")


def training_markdown(rows: List[Dict]) -> str:
    lines = ["## Training length", "",
             "Per system and condition (mean ± sample std over seeds; each seed's updates in brackets): the "
             "updates trained, what stopped the training (patience: CONVERGE's validations without improvement; "
             "cap: the updates' cap, MAX_UPDATE), the epochs (updates / updates per epoch) and what they held: "
             "training pairs, original pairs (before TRAIN_CONCAT's joins) and tokens (source + target, EOS "
             "included; within an epoch, its share of the updates).", "",
             "| condition | system | updates | stopped by | cap | epochs | pairs seen | original pairs seen | tokens seen |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        tokens = None
        if r["src_tokens"] and r["tgt_tokens"]:
            tokens = {"mean": r["src_tokens"]["mean"] + r["tgt_tokens"]["mean"], "std": 0.0,
                      "per_seed": [a + b for a, b in zip(r["src_tokens"]["per_seed"], r["tgt_tokens"]["per_seed"])]}
            tokens["mean"], tokens["std"] = mean_std(tokens["per_seed"])
        each = " (" + ", ".join(str(u) for u in r["updates"]["per_seed"]) + ")" if r["updates"] and len(r["updates"]["per_seed"]) > 1 else ""
        lines.append(f"| {r['condition']} | {r['system']} | {_fmt(r['updates'], big=True)}{each} | "
                     f"{', '.join(sorted({str(s) for s in r['stopped']}))} | {', '.join(map(str, r['cap'])) or '-'} | "
                     f"{_fmt(r['epochs'], 1)} | {_fmt(r['pairs'], big=True)} | {_fmt(r['original_pairs'], big=True)} | "
                     f"{_fmt(tokens, big=True)} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the curve
def point_scores(run_dir: str, key: str, tokenize: str = "13a") -> Optional[Dict]:
    """BLEU, chrF++ and length ratio of the run's evaluation ``key`` (None when it has none); its
    hypotheses must be the file it scored."""
    rec = run_record.load(run_dir) or {}
    entry = (rec.get("evaluations") or {}).get(key)
    if entry is None:
        return None
    hyp_path = run_record.check_evaluation(run_dir, key, entry)
    with open(hyp_path, encoding="utf-8") as f:
        hyps = f.read().splitlines()
    with open(entry["ref"], encoding="utf-8") as f:
        refs = f.read().splitlines()
    if len(hyps) != len(refs):
        raise ValueError(f"{hyp_path}: {len(hyps)} lines, but its reference {entry['ref']} has {len(refs)}")
    return dict(point_metrics(hyps, refs, tokenize), hyp=hyp_path, ref=entry["ref"],
                checkpoint=[a["file"] for a in entry.get("averaged") or []])


def point_metrics(hyps: Sequence[str], refs: Sequence[str], tokenize: str = "13a") -> Dict:
    """A curve point's cells: sacreBLEU's BLEU, chrF++ and length ratio (``sys_len / ref_len``)."""
    import sacrebleu

    bleu = sacrebleu.corpus_bleu(hyps, [refs], tokenize=tokenize)
    chrf = sacrebleu.corpus_chrf(hyps, [refs], word_order=2)
    return {"bleu": bleu.score, "chrf": chrf.score, "length_ratio": bleu.sys_len / bleu.ref_len}


def point_stats(per_seed: Sequence[Optional[Dict]]) -> Dict:
    """The cells of one row and k from each seed's :func:`point_metrics` (None: no value there)."""
    return {m: _stat([p[m] if p else None for p in per_seed]) for m in ("bleu", "chrf", "length_ratio")}


def curve_table(runs: Runs, points: Sequence[int], subsets: Sequence[Tuple[str, str]],
                tokenize: str = "13a") -> Dict:
    """``subsets``: (label, evaluation subset) pairs, e.g. ("1", "test"), ("8", "concat/k8.test")."""
    out = {"points": list(points), "k": [k for k, _ in subsets], "rows": [], "missing": []}
    for cond, name, dirs in runs:
        epochs = {d: run_record.load(d).get("epoch") for d in dirs}
        for u in points:
            row = {"condition": cond, "system": name, "updates": u, "seen": {}, "k": {}}
            for key in ("epochs", "pairs", "original_pairs"):
                row["seen"][key] = _stat([seen_at(epochs[d], u)[key] for d in dirs])
            for label, subset in subsets:
                per = []
                for d in dirs:
                    got = point_scores(d, f"curve/u{u}/{subset}", tokenize)
                    if got is None:
                        out["missing"].append(f"{cond}, {os.path.basename(d)}: no evaluation at update {u} on {subset}")
                    per.append(got)
                row["k"][label] = point_stats(per)
                row["k"][label]["files"] = [p and {"hyp": p["hyp"], "ref": p["ref"], "checkpoint": p["checkpoint"]} for p in per]
            out["rows"].append(row)
    return out


def curve_markdown(table: Dict) -> str:
    ks = table["k"]
    head = " | ".join(f"k = {k}: BLEU | chrF++ | len. ratio" for k in ks)
    lines = ["# Learning curves", "",
             "Each run's single checkpoint of that update (no average), per system and training condition: "
             "mean ± sample std over seeds of sacreBLEU's BLEU, chrF++ and length ratio on the test set (k = 1) "
             "and its joined inputs of the largest k; epochs and original pairs seen at that update (they differ "
             "between the conditions: the joined pairs make an epoch longer). '-': a run without that "
             "checkpoint (stopped before it, or trained before CURVE kept it).", "",
             f"| system | condition | updates | epochs | original pairs seen | {head} |",
             "|---|---|---:|---:|---:|" + "---:|" * (3 * len(ks))]
    for r in table["rows"]:
        cells = []
        for k in ks:
            e = r["k"][k]
            cells += [_fmt(e["bleu"]), _fmt(e["chrf"]), _fmt(e["length_ratio"])]
        lines.append(f"| {r['system']} | {r['condition']} | {r['updates']:,} | {_fmt(r['seen']['epochs'], 1)} | "
                     f"{_fmt(r['seen']['original_pairs'], big=True)} | " + " | ".join(cells) + " |")
    if table["missing"]:
        lines += ["", "Not evaluated: " + "; ".join(table["missing"])]
    return "\n".join(lines) + "\n\n" + ranking_markdown(ranking_table(table))


def plot_system(table: Dict, system: str, png_path: str) -> None:
    """BLEU of k = 1 and the largest k against updates (top) and original pairs seen (bottom), one
    line per condition (error bars: the std over seeds)."""
    from .figures import _pyplot, _save

    plt = _pyplot()
    ks = table["k"]
    fig, axes = plt.subplots(2, len(ks), figsize=(4.5 * len(ks), 6.5), squeeze=False)
    conds = list(dict.fromkeys(r["condition"] for r in table["rows"] if r["system"] == system))
    for row_i, x_of in enumerate(("updates", "original_pairs")):
        for col, k in enumerate(ks):
            ax = axes[row_i][col]
            for cond in conds:
                pts = [(r["updates"] if x_of == "updates" else (r["seen"]["original_pairs"] or {}).get("mean"),
                        r["k"][k]["bleu"]) for r in table["rows"] if r["system"] == system and r["condition"] == cond]
                pts = [(x, s) for x, s in pts if x is not None and s is not None]
                if pts:
                    ax.errorbar([x for x, _ in pts], [s["mean"] for _, s in pts], yerr=[s["std"] for _, s in pts],
                                marker="o", capsize=3, label=cond)
            ax.set_xlabel("updates" if x_of == "updates" else "original pairs seen")
            ax.set_ylabel(f"BLEU, k = {k}")
            ax.set_title(f"{system}, k = {k}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    _save(fig, png_path)
    plt.close(fig)


# ---------------------------------------------------------------- the order of the systems
def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def ranking_table(table: Dict) -> List[Dict]:
    """Per condition and k of a :func:`curve_table`: at each point the systems with a BLEU there,
    best first (a tie keeps the order of the table); ``stable_from``, the first point from which
    every two systems keep their order (better, worse or tied) at every later point where both have
    a value; None without points."""
    out = []
    conds = list(dict.fromkeys(r["condition"] for r in table["rows"]))
    for cond, k in itertools.product(conds, table["k"]):
        bleu = {}  # (system, update) -> mean BLEU
        for r in table["rows"]:
            stat = r["k"][k]["bleu"] if r["condition"] == cond else None
            if stat is not None:
                bleu[(r["system"], r["updates"])] = stat["mean"]
        systems = list(dict.fromkeys(r["system"] for r in table["rows"] if r["condition"] == cond))
        points = table["points"]
        orders = [{"updates": u, "order": sorted((s for s in systems if (s, u) in bleu), key=lambda s: -bleu[(s, u)])}
                  for u in points]

        def steady(start: int) -> bool:
            later = points[start:]
            for a, b in itertools.combinations(systems, 2):
                signs = {_sign(bleu[(a, u)] - bleu[(b, u)]) for u in later if (a, u) in bleu and (b, u) in bleu}
                if len(signs) > 1:
                    return False
            return True
        stable = next((points[i] for i in range(len(points)) if steady(i)), None)
        out.append({"condition": cond, "k": k, "orders": orders, "stable_from": stable})
    return out


def ranking_markdown(rows: List[Dict]) -> str:
    if not rows:
        return ""
    points = [o["updates"] for o in rows[0]["orders"]]
    lines = ["## The order of the systems by BLEU", "",
             "At each update of the curve, the systems with a checkpoint there, best BLEU first (mean over seeds; a "
             "run that stopped before an update is not in its order). The last column: the first update from which "
             "no two systems change order at any later update where both have a value ('the last point': the order "
             "changed up to it).", "",
             "| condition | k | " + " | ".join(f"{u:,}" for u in points) + " | no pair changes order from |",
             "|---|---:|" + "---|" * len(points) + "---:|"]
    for r in rows:
        u = r["stable_from"]
        since = "-" if u is None else ("the last point" if u == points[-1] and len(points) > 1 else f"{u:,}")
        lines.append(f"| {r['condition']} | {r['k']} | " + " | ".join(" > ".join(o["order"]) or "-" for o in r["orders"])
                     + f" | {since} |")
    return "\n".join(lines) + "\n"
