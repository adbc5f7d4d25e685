"""Several seeds per system in ``fairseq-attn-results``.

Run directories written with ``SEEDS="1 2 3"`` end in ``_seed<N>``
(``$WORK/runs/<ARCH>_seed1`` ...). :func:`group_runs` groups runs by system
name (by default the directory name without that suffix), keeping the order
of first appearance: the first system is the baseline.

* BLEU per system: mean ± sample standard deviation over its seeds (n - 1 in the
  denominator, as Dufter et al. and most MT papers report; no std for one seed).
* Significance, all seed pairs: each seed of a system is tested against each seed
  of the baseline (paired bootstrap and approximate randomisation, through
  :func:`fairseq_attn_plugins.reporting.significance.paired_tests`, marked by its
  ``significance_mark``). The system gets a mark only if *every* pair is marked,
  with the system better (a worse system gets none); the mark shown is the weakest of them. Pooling the outputs
  of all seeds into one test would treat the variation between training runs as
  extra test sentences and so hide it; the all-pairs rule asks that the claim hold
  whichever seed of either system one had happened to train, which is what a
  reader of a single-seed comparison needs.
"""

import os
import re
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

from .curves import mean_std
from .results import fmt_params, parse_train_log
from .significance import paired_tests, read_lines, significance_mark

HELP = """\
several seeds: runs with the same name (default: the folder name without '_seed<N>')
are seeds of one system. BLEU is printed as mean ± sample standard deviation (n-1)
over seeds. A system is marked * / ** only if it is significant against the baseline
(both paired tests, p < 0.05 / p < 0.01) for EVERY pair of a system seed and a
baseline seed, all with the system better; the weakest mark is shown. Not pooled
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
    """``{system: [(seed, run_dir), ...]}`` in order of first appearance."""
    groups: "OrderedDict[str, List[Tuple[Optional[int], str]]]" = OrderedDict()
    for name, d in zip(names, run_dirs):
        groups.setdefault(name, []).append((split_seed(d)[1], d))
    for name, runs in groups.items():
        seeds = [s for s, _ in runs if s is not None]
        if len(seeds) != len(set(seeds)):
            raise ValueError(f"system {name!r}: a seed is given twice ({', '.join(d for _, d in runs)})")
    return groups


def all_pairs_mark(pairs: Sequence[Tuple[float, str]]) -> str:
    """``pairs``: (BLEU delta, mark) of every (system seed, baseline seed) pair. The weakest
    mark if every pair is marked and every delta is positive (better than the baseline: a
    worse system never gets a mark, as in ``significance.system_mark``), else ''."""
    if not pairs or any(m == "" for _, m in pairs):
        return ""
    if not all(d > 0 for d, _ in pairs):
        return ""
    return min((m for _, m in pairs), key=_MARK_RANK.__getitem__)


def collect_seeds(groups: "OrderedDict[str, List[Tuple[Optional[int], str]]]", ref_path: str,
                  tokenize: str = "13a", bs_samples: int = 1000, ar_trials: int = 10000) -> Dict:
    """The table over seeds: one row per system, baseline (first group) first."""
    if len(groups) < 2:
        raise ValueError("need a baseline and at least one other system to compare")
    runs = [(name, seed, d) for name, rs in groups.items() for seed, d in rs]
    for name, _, d in runs:
        for f in ("train.log", "hyp.txt"):
            if not os.path.isfile(os.path.join(d, f)):
                raise FileNotFoundError(f"run {name!r}: {os.path.join(d, f)} is missing "
                                        f"(train and evaluate the run first)")
    refs = read_lines(ref_path)
    base_name = next(iter(groups))
    base_runs = [r for r in runs if r[0] == base_name]
    others = [r for r in runs if r[0] != base_name]
    hyps = {d: read_lines(os.path.join(d, "hyp.txt")) for _, _, d in runs}
    bleu: Dict[str, float] = {}
    pairs: Dict[str, List[Dict]] = {name: [] for name in groups}
    signature = None
    for _, b_seed, b_dir in base_runs:  # one call per baseline seed tests every other run against it
        res = paired_tests(refs, [(b_dir, hyps[b_dir])] + [(d, hyps[d]) for _, _, d in others],
                           tokenize, bs_samples, ar_trials)
        signature = signature or res["signature"]
        bleu[b_dir] = res["systems"][0]["bleu"]
        for (name, seed, d), s in zip(others, res["systems"][1:]):
            bleu[d] = s["bleu"]
            delta = s["bleu"] - bleu[b_dir]
            pairs[name].append({
                "seed": seed, "baseline_seed": b_seed, "delta": delta,
                "p_bootstrap": s.get("p_bootstrap"), "p_ar": s.get("p_ar"),
                # identical outputs get no mark (sacreBLEU's p-values are (count + 1) / (n + 1))
                "mark": significance_mark([s.get("p_bootstrap"), s.get("p_ar")]) if abs(delta) > 1e-9 else "",
            })
    rows = []
    base_mean = None
    for name, rs in groups.items():
        logs = [parse_train_log(os.path.join(d, "train.log")) for _, d in rs]
        scores = [bleu[d] for _, d in rs]
        mean, std = mean_std(scores)
        base_mean = mean if base_mean is None else base_mean
        wps = [lg["train_wps"] for lg in logs if lg["train_wps"] is not None]
        is_base = name == base_name
        rows.append({
            "system": name, "n_seeds": len(rs), "seeds": [s for s, _ in rs], "run_dirs": [d for _, d in rs],
            "params": logs[0]["params"], "train_wps": mean_std(wps)[0] if wps else None,
            "bleu_per_seed": scores, "bleu_mean": mean, "bleu_std": std if len(rs) > 1 else None,
            "delta": None if is_base else mean - base_mean,
            "pairs": pairs[name],
            "pairs_marked": None if is_base else sum(1 for p in pairs[name] if p["mark"]
                                                     and (p["delta"] > 0) == (mean > base_mean)),
            "mark": "" if is_base else all_pairs_mark([(p["delta"], p["mark"]) for p in pairs[name]]),
        })
    return {"baseline": base_name, "ref": ref_path, "signature": signature, "rows": rows,
            "std": "sample standard deviation over seeds (n-1)",
            "significance": "all seed pairs against the baseline"}


def format_markdown(table: Dict) -> str:
    out = ["| # | System | Seeds | #Params | Speed (tok/s) | BLEU (mean ± std) | Δ | pairs sig. | BLEU per seed |",
           "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for i, r in enumerate(table["rows"], 1):
        std = "" if r["bleu_std"] is None else f" ± {r['bleu_std']:.2f}"
        delta = "-" if r["delta"] is None else f"{r['delta']:+.2f}"
        marked = "-" if r["pairs_marked"] is None else f"{r['pairs_marked']}/{len(r['pairs'])}"
        wps = "?" if r["train_wps"] is None else f"{r['train_wps']:.0f}"
        per_seed = ", ".join(f"{'?' if s is None else s}: {b:.2f}" for s, b in zip(r["seeds"], r["bleu_per_seed"]))
        out.append(f"| {i} | {r['system']} | {r['n_seeds']} | {fmt_params(r['params'])} | {wps} | "
                   f"{r['bleu_mean']:.2f}{std}{r['mark']} | {delta} | {marked} | {per_seed} |")
    out.append("")
    out.append(f"Baseline: {table['baseline']}. BLEU: mean ± sample standard deviation (n-1) over seeds. "
               "`*` / `**`: better or worse than the baseline with p < 0.05 / p < 0.01 in both paired "
               "bootstrap resampling and paired approximate randomisation (sacreBLEU) for EVERY pair of a "
               "system seed and a baseline seed, all with the system better (the weakest mark is shown); "
               "'pairs sig.' counts the pairs that are.")
    for test, sigs in (table["signature"] or {}).items():
        for s in sigs.values():
            out.append(f"sacreBLEU signature ({test}): `{s}`")
    return "\n".join(out)
