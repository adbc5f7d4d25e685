"""Several seeds per system in ``fairseq-attn-results``.

Run directories written with ``SEEDS="1 2 3"`` end in ``_seed<N>``
(``$WORK/runs/<ARCH>_seed1`` ...). :func:`group_runs` groups runs by system
name (by default the directory name without that suffix), keeping the order
of first appearance: the first system is the baseline.

* Every metric (BLEU, chrF++, COMET...) per system: mean ± sample standard deviation
  over its seeds (n - 1 in the denominator, as Dufter et al. and most MT papers report;
  no std for one seed).
* Significance, all seed pairs: each seed of a system is tested against each seed
  of the baseline (paired bootstrap and approximate randomisation, through
  :func:`fairseq_attn_reports.significance.paired_tests`, every metric on
  the same resamples, each pair marked by ``metrics.metric_mark``: only when the system
  seed is better). The system gets a mark on a metric only if *every* pair is marked
  (a worse system gets none); the mark shown is the weakest of them. Pooling the outputs
  of all seeds into one test would treat the variation between training runs as
  extra test sentences and so hide it; the all-pairs rule asks that the claim hold
  whichever seed of either system one had happened to train, which is what a
  reader of a single-seed comparison needs.
"""

import os
import re
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_attn_records import metrics as M
from fairseq_attn_records import run_record

from .curves import mean_std
from .results import (TRAIN_TIME_LEGEND, comparability_lines, fmt_params, fmt_train_time, mark_trained_differently,
                      parse_train_log, read_outputs, signature_lines, train_time)
from .runs import MODEL_HEADER, comparability, load_runs, model_cell, model_legend, stale_notes, trained_as
from .significance import LENGTH_RATIO_LEGEND, fmt_ratio, paired_tests

HELP = """\
several seeds: runs with the same name (default: the folder name without '_seed<N>')
are seeds of one system. Every metric is printed as mean ±
sample standard deviation (n-1) over seeds. A system is marked * / ** on a metric only if it is better than the
baseline and significantly so (both paired tests, p < 0.05 / p < 0.01) for EVERY pair
of a system seed and a baseline seed; the weakest mark is shown. Not pooled
outputs: pooling counts the variation between training runs as extra test sentences
and so hides it; every pair must hold whichever seeds one had trained."""

_SEED_DIR = re.compile(r"^(.+)_seed(\d+)$")
_MARK_RANK = {"": 0, "*": 1, "**": 2}


def split_seed(run_dir: str) -> Tuple[str, Optional[int]]:
    """``.../transformer_x_seed3`` -> ("transformer_x", 3); no suffix -> (name, None)."""
    name = os.path.basename(os.path.normpath(run_dir))
    m = _SEED_DIR.match(name)
    return (m.group(1), int(m.group(2))) if m else (name, None)


def default_names(run_dirs: Sequence[str]) -> List[str]:
    return [split_seed(d)[0] for d in run_dirs]


def group_runs(names: Sequence[str], run_dirs: Sequence[str]) -> "OrderedDict[str, List[Tuple[Optional[int], str]]]":
    """``{system: [(seed, run_dir), ...]}`` in order of first appearance.

    With run records (:mod:`fairseq_attn_reports.runs`): the seed is the recorded one
    (a folder name saying another seed is an error), the same run given twice is an error, and
    the runs of one system must be the same run but for the seed (architecture, model and
    training flags, data-bin, effective batch), else the error names the two runs and the
    difference."""
    infos = {d: r for d, r in zip(run_dirs, load_runs(run_dirs))}
    groups: "OrderedDict[str, List[Tuple[Optional[int], str]]]" = OrderedDict()
    for name, d in zip(names, run_dirs):
        seed = split_seed(d)[1]
        rec = infos[d].record
        if rec is not None:
            if seed is not None and rec.get("seed") != seed:
                raise ValueError(f"{d}: the folder name says seed {seed} but its run record says seed {rec.get('seed')}")
            seed = rec.get("seed")
        groups.setdefault(name, []).append((seed, d))
    for name, runs in groups.items():
        seeds = [s for s, _ in runs if s is not None]
        if len(seeds) != len(set(seeds)):
            raise ValueError(f"system {name!r}: a seed is given twice ({', '.join(d for _, d in runs)})")
        recorded = [(d, _without_seed(infos[d].record)) for _, d in runs if infos[d].record is not None]
        for d, rec in recorded[1:]:
            diff = run_record.differences(recorded[0][1], rec, labels=(f"in {recorded[0][0]}", f"in {d}"))
            if diff:
                raise ValueError(f"system {name!r}: {recorded[0][0]} and {d} are not seeds of one system: "
                                 + "; ".join(diff) + " (give them different --names)")
    return groups


def _without_seed(rec: Dict) -> Dict:
    out = dict(rec, training={k: v for k, v in (rec.get("training") or {}).items() if k != "seed"})
    out["model"] = {k: v for k, v in (rec.get("model") or {}).items() if k != "seed"}
    return out


def all_pairs_mark(pairs: Sequence[Tuple[float, str]], higher_is_better: bool = True) -> str:
    """``pairs``: (delta, mark) of every (system seed, baseline seed) pair on one metric. The
    weakest mark if every pair is marked and every delta is in the better direction (a
    worse system never gets a mark, as in ``metrics.metric_mark``), else ''."""
    if not pairs or any(m == "" for _, m in pairs):
        return ""
    if not all((d > 0) if higher_is_better else (d < 0) for d, _ in pairs):
        return ""
    return min((m for _, m in pairs), key=_MARK_RANK.__getitem__)


def collect_seeds(groups: "OrderedDict[str, List[Tuple[Optional[int], str]]]", ref_path: str,
                  tokenize: str = "13a", bs_samples: int = 1000, ar_trials: int = 10000,
                  metrics: Sequence[str] = M.DEFAULT_METRICS, comet=None, src_path: Optional[str] = None,
                  scorers=None) -> Dict:
    """The table over seeds: one row per system, baseline (first group) first; per metric
    (``row["metrics"][key]``) the scores per seed, mean ± std, delta, every pair's test and the
    all-pairs mark; BLEU's also flattened (``bleu_mean``, ``bleu_std``, ``pairs``, ``mark``...)."""
    if len(groups) < 2:
        raise ValueError("need a baseline and at least one other system to compare")
    runs = [(name, seed, d) for name, rs in groups.items() for seed, d in rs]
    for name, _, d in runs:
        if not os.path.isfile(os.path.join(d, "train.log")):
            raise FileNotFoundError(f"run {name!r}: {os.path.join(d, 'train.log')} is missing "
                                    f"(train and evaluate the run first)")
    infos = dict(zip([d for _, _, d in runs], load_runs([d for _, _, d in runs])))
    outputs = {d: infos[d].hyp_for(ref_path) for _, _, d in runs}  # the subset evaluated on ref_path
    notes: list = stale_notes([name if seed is None else f"{name} seed {seed}" for name, seed, _ in runs],
                              [outputs[d][1] for _, _, d in runs])
    refs, hyp_lists, sources = read_outputs([(name, outputs[d][0]) for name, _, d in runs], ref_path,
                                            src_path, notes)
    hyps = {d: h for (_, _, d), h in zip(runs, hyp_lists)}
    scored = score_seeds(OrderedDict((name, [(seed, hyps[d]) for seed, d in rs]) for name, rs in groups.items()),
                         refs, tokenize, bs_samples, ar_trials, metrics, comet, sources, scorers)
    rows = []
    trained, trained_names, row_trained = [], [], []
    for name, rs in groups.items():
        logs = [parse_train_log(os.path.join(d, "train.log")) for _, d in rs]
        ts = [trained_as(infos[d], outputs[d][1], lg["num_updates"]) for (_, d), lg in zip(rs, logs)]
        trained += ts
        trained_names += [name if seed is None else f"{name} seed {seed}" for seed, _ in rs]
        row_trained.append(ts)
        wps = [lg["train_wps"] for lg in logs if lg["train_wps"] is not None]
        system_scores = scored["systems"][name]
        rows.append({
            "system": name, "n_seeds": len(rs), "seeds": [s for s, _ in rs], "run_dirs": [d for _, d in rs],
            "hyps": [outputs[d][0] for _, d in rs],  # the translations scored, per seed
            # the seeds' records agree but for the seed (group_runs): the first recorded one says it
            "trained_model": next((m for m in (infos[d].trained_model() for _, d in rs) if m), None),
            "params": logs[0]["params"], "train_wps": mean_std(wps)[0] if wps else None,
            "train_time_per_seed": [train_time(infos[d]) for _, d in rs], **system_scores,
            "stale": [s for s in (outputs[d][1].get("stale") for _, d in rs) if s],
        })
    for r, ts in zip(rows, row_trained):  # a row is flagged when any of its seeds differs from the first baseline seed
        per_seed = [{} for _ in range(len(ts) + 1)]
        mark_trained_differently(per_seed, [trained[0]] + ts)
        r["trained_differently"] = sorted({w for p in per_seed for w in p["trained_differently"]})
    return {"baseline": next(iter(groups)), "ref": ref_path, "src": src_path, "metrics": scored["metrics"],
            "labels": scored["labels"], "signature": scored["signature"], "tokenize": tokenize,
            "bs_samples": bs_samples, "ar_trials": ar_trials, "notes": notes,
            "rows": rows, "comparability": comparability(trained_names, trained),
            "std": "sample standard deviation over seeds (n-1)",
            "significance": "all seed pairs against the baseline"}


def score_seeds(systems: "OrderedDict[str, List[Tuple[Optional[int], Sequence[str]]]]", refs: Sequence[str],
                tokenize: str = "13a", bs_samples: int = 1000, ar_trials: int = 10000,
                metrics: Sequence[str] = M.DEFAULT_METRICS, comet=None, sources: Optional[Sequence[str]] = None,
                scorers=None) -> Dict:
    """The scored part of the seeds table: ``systems`` ``{name: [(seed, its outputs), ...]}``, the
    baseline first. Every seed of the baseline is tested against every seed of every other system
    (one :func:`.significance.paired_tests` call per baseline seed). Returns ``{"metrics", "labels",
    "signature", "systems": {name: {"bleu_per_seed", "bleu_mean", "bleu_std", "delta", "pairs",
    "pairs_marked", "mark", "metrics": {key: {"per_seed", "mean", "std", "delta", "pairs",
    "pairs_marked", "mark"}}, "length_ratio_per_seed", "length_ratio_mean", "length_ratio_std"}}}``:
    the table (:func:`collect_seeds`) and the re-scoring of a committed study (:mod:`.study_bundle`)
    both read them here."""
    runs = [(name, seed, (name, i), hyps) for name, rs in systems.items() for i, (seed, hyps) in enumerate(rs)]
    base_name = next(iter(systems))
    base_runs = [r for r in runs if r[0] == base_name]
    others = [r for r in runs if r[0] != base_name]
    score: Dict = {}
    ratio: Dict = {}  # run -> sacreBLEU's sys_len / ref_len
    pairs: Dict[str, Dict[str, List[Dict]]] = {name: {} for name in systems}
    res = None
    stats = M.SentenceStats(refs, tokenize)  # each run's statistics extracted once, read by every seed's call
    for _, b_seed, b_key, b_hyps in base_runs:  # one call per baseline seed tests every other run against it
        res = paired_tests(refs, [(str(b_key), b_hyps)] + [(str(key), h) for _, _, key, h in others],
                           tokenize, bs_samples, ar_trials, metrics=metrics, comet=comet, sources=sources,
                           scorers=scorers, stats=stats)
        base_cells = res["systems"][0]["scores"]
        score[b_key] = {k: c["score"] for k, c in base_cells.items()}
        ratio[b_key] = res["systems"][0]["length_ratio"]
        for (name, seed, key, _), s in zip(others, res["systems"][1:]):
            score[key] = {k: c["score"] for k, c in s["scores"].items()}
            ratio[key] = s["length_ratio"]
            for k, cell in s["scores"].items():
                pairs[name].setdefault(k, []).append({
                    "seed": seed, "baseline_seed": b_seed, "delta": cell["score"] - base_cells[k]["score"],
                    "p_bootstrap": cell.get("p_bootstrap"), "p_ar": cell.get("p_ar"),
                    # better than this baseline seed, significantly (identical outputs: never)
                    "mark": M.metric_mark(k, cell, base_cells[k]["score"]),
                })
    keys = res["metrics"]
    out: Dict[str, Dict] = {}
    base_means: Dict[str, float] = {}
    for name, rs in systems.items():
        is_base = name == base_name
        run_keys = [(name, i) for i in range(len(rs))]
        per_metric = {}
        for k in keys:
            values = [score[key][k] for key in run_keys]
            mean, std = mean_std(values)
            if is_base:
                base_means[k] = mean
            ps = pairs[name].get(k, [])
            per_metric[k] = {
                "per_seed": values, "mean": mean, "std": std if len(rs) > 1 else None,
                "delta": None if is_base else mean - base_means[k], "pairs": ps,
                "pairs_marked": None if is_base else sum(1 for p in ps if p["mark"]),
                "mark": "" if is_base else all_pairs_mark([(p["delta"], p["mark"]) for p in ps],
                                                          M.higher_is_better(k)),
            }
        b = per_metric["bleu"]
        ratios = [ratio[key] for key in run_keys]
        ratio_mean, ratio_std = mean_std(ratios) if None not in ratios else (None, None)
        out[name] = {
            "bleu_per_seed": b["per_seed"], "bleu_mean": b["mean"], "bleu_std": b["std"], "delta": b["delta"],
            "pairs": b["pairs"], "pairs_marked": b["pairs_marked"], "mark": b["mark"], "metrics": per_metric,
            "length_ratio_per_seed": ratios, "length_ratio_mean": ratio_mean,
            "length_ratio_std": ratio_std if len(rs) > 1 else None}
    return {"metrics": keys, "labels": res["labels"], "signature": res["signature"], "systems": out}


def format_markdown(table: Dict) -> str:
    keys = table.get("metrics", ["bleu"])
    labels = table.get("labels", {"bleu": "BLEU"})
    out = [f"| # | System | {MODEL_HEADER} | Seeds | #Params | Speed (tok/s) |"
           + "".join(f" {labels[k]} (mean ± std) | Δ | pairs sig. |" for k in keys)
           + " Len. ratio (mean ± std) | BLEU per seed | Train time per seed |",
           "|---|---|---|---:|---:|---:|" + "---:|---:|---:|" * len(keys) + "---:|---|---|"]
    models = [model_cell(r.get("trained_model")) for r in table["rows"]]
    for i, r in enumerate(table["rows"], 1):
        wps = "?" if r["train_wps"] is None else f"{r['train_wps']:.0f}"
        cells = ""
        for k in keys:
            m = r["metrics"][k]
            nd = M.digits(k)
            std = "" if m["std"] is None else f" ± {m['std']:.{nd}f}"
            delta = "-" if m["delta"] is None else f"{m['delta']:+.{nd}f}"
            marked = "-" if m["pairs_marked"] is None else f"{m['pairs_marked']}/{len(m['pairs'])}"
            cells += f" {m['mean']:.{nd}f}{std}{m['mark']} | {delta} | {marked} |"
        lr, lr_std = r.get("length_ratio_mean"), r.get("length_ratio_std")
        cells += f" {fmt_ratio(lr)}{'' if lr_std is None else f' ± {lr_std:.3f}'} |"
        per_seed = ", ".join(f"{'?' if s is None else s}: {b:.2f}" for s, b in zip(r["seeds"], r["bleu_per_seed"]))
        dagger = (" †" if r.get("trained_differently") else "") + (" ‡" if r.get("stale") else "")
        out.append(f"| {i} | {r['system']}{dagger} | {models[i - 1]} | {r['n_seeds']} | {fmt_params(r['params'])} | {wps} |" + cells
                   + f" {per_seed} | {'; '.join(fmt_train_time(t) for t in r['train_time_per_seed'])} |")
    out.append("")
    out.append(f"Baseline: {table['baseline']}. Scores: mean ± sample standard deviation (n-1) over seeds. "
               f"`*` / `**` after a score: better than the baseline on that metric with p < 0.05 / p < 0.01 "
               f"in both paired bootstrap resampling ({table.get('bs_samples', 1000)} resamples) and paired "
               f"approximate randomisation ({table.get('ar_trials', 10000)} trials), the same resamples for "
               f"every metric, for EVERY pair of a system seed and a baseline seed (the weakest mark is "
               f"shown); an equal or worse system gets no mark. 'pairs sig.' counts the pairs in which "
               f"the system seed is significantly better than the baseline seed. {LENGTH_RATIO_LEGEND[:-1]}; "
               f"mean ± sample standard deviation over seeds.")
    out.append(model_legend(models))
    out.append(TRAIN_TIME_LEGEND)
    out += comparability_lines(table)
    out += signature_lines(table["signature"])
    out += table.get("notes", [])
    return "\n".join(out)
