"""Figures 2 and 3 of the CSAN paper (Yang et al., 2019), from finished runs.

* Figure 2 -- BLEU on the validation set (a) of 1D-CSAN against the window
  size ``--csan-window`` and (b) of 2D-CSAN against the number of attended
  heads ``--csan-heads`` with the window fixed to 11; with several seeds per
  point, their mean and sample std (error bars).
* Figure 3 -- the improvement of the n-gram accuracy (BLEU's modified n-gram
  precision, n = 1..4) of each system over the baseline, in percentage points,
  from sacreBLEU's own statistics (``BLEUScore.counts`` / ``.totals``: clipped
  n-gram matches and hypothesis n-grams summed over the corpus).

Deviation: the paper does not give the grid of Figure 2 in its text; the
recipe's defaults (windows 3..15, heads 1, 3, 5, 7) are our choice. Heads are
odd because the attended area is centred on the head (``--csan-heads``).
"""

import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq_attn_records.output_files import staged
from fairseq_attn_records.text_inputs import check_aligned, read_text_lines

from .runs import Run, load_runs

ORDERS = (1, 2, 3, 4)


def _check_lengths(name: str, hyps: Sequence[str], refs: Sequence[str]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{name}: {len(hyps)} lines but the reference has {len(refs)}")


def ngram_statistics(hyps: Sequence[str], refs: Sequence[str], tokenize: str = "13a") -> Dict:
    """sacreBLEU's corpus n-gram statistics: ``counts[n-1]`` clipped matches,
    ``totals[n-1]`` hypothesis n-grams, ``precisions[n-1] = 100 * counts / totals``."""
    from sacrebleu.metrics import BLEU  # here: the commands that draw no figure do not load sacreBLEU

    _check_lengths("hypotheses", hyps, refs)
    bleu = BLEU(tokenize=tokenize, force=tokenize == "none")
    s = bleu.corpus_score(list(hyps), [list(refs)])
    counts, totals = [int(c) for c in s.counts], [int(t) for t in s.totals]
    precisions = [100.0 * c / t if t else 0.0 for c, t in zip(counts, totals)]
    return {"bleu": s.score, "counts": counts, "totals": totals, "precisions": precisions,
            "signature": str(bleu.get_signature())}


def ngram_improvement(refs: Sequence[str], baseline: Tuple[str, Sequence[str]],
                      systems: Sequence[Tuple[str, Sequence[str]]], tokenize: str = "13a") -> Dict:
    """Figure 3's numbers: each system's n-gram accuracy minus the baseline's (points)."""
    base = ngram_statistics(baseline[1], refs, tokenize)
    out = {"orders": list(ORDERS), "baseline": dict(base, name=baseline[0]), "signature": base["signature"],
           "systems": []}
    for name, hyps in systems:
        _check_lengths(name, hyps, refs)
        st = ngram_statistics(hyps, refs, tokenize)
        st["improvement"] = [p - b for p, b in zip(st["precisions"], base["precisions"])]
        out["systems"].append(dict(st, name=name))
    return out


def _pyplot():
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq's import leaves DEBUG on
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, png_path: str) -> None:
    fig.tight_layout()
    with staged(png_path, ".png") as tmp:
        fig.savefig(tmp, dpi=100)


def plot_figure3(data: Dict, png_path: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    n = len(data["systems"])
    width = 0.8 / max(n, 1)
    for i, s in enumerate(data["systems"]):
        xs = [o + (i - (n - 1) / 2) * width for o in data["orders"]]
        ax.bar(xs, s["improvement"], width, label=s["name"])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(data["orders"])
    ax.set_xticklabels([f"{o}-gram" for o in data["orders"]])
    ax.set_ylabel("Gap of n-gram accuracy (points)")
    ax.set_title(f"Improvement over {data['baseline']['name']}")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, png_path)
    plt.close(fig)


def sweep_points(ref_path: str, runs: Sequence[Tuple[int, str]], tokenize: str = "13a",
                 expect: Optional[Callable[[int], Dict]] = None) -> List[Dict]:
    """(value, run_dir) -> one point per value, sorted by value: BLEU of the translations of the
    subset evaluated on ``ref_path``. A value given more than once: the runs are its seeds (they must
    be one run but for the seed: :func:`.seeds.group_runs`); the point holds each seed's BLEU
    (``bleu_per_seed``, ``seeds``, ``run_dirs``, ``hyps``), their mean (``bleu``) and sample std
    (``bleu_std``, None for one seed). ``expect(value)``: the keyword arguments of :meth:`Run.expect`
    (label, architecture, flags) each run must satisfy."""
    from sacrebleu.metrics import BLEU

    from .curves import mean_std
    from .seeds import group_runs

    refs = read_text_lines(ref_path, "reference")
    scored = {}
    for (value, d), run in zip(runs, load_runs([d for _, d in runs])):
        if expect is not None:
            run.expect(**expect(int(value)))
        hyp_path, ev = run.hyp_for(ref_path)
        hyps = read_text_lines(hyp_path, "system output")
        check_aligned(ref_path, refs, hyp_path, hyps)
        scored[d] = (hyp_path, BLEU(tokenize=tokenize).corpus_score(hyps, [refs]).score, ev.get("stale"))
    groups = group_runs([str(int(v)) for v, _ in runs], [d for _, d in runs])
    points = []
    for value, seeds in groups.items():
        dirs = [d for _, d in seeds]
        per_seed = [scored[d][1] for d in dirs]
        mean, std = mean_std(per_seed)
        points.append({"value": int(value), "bleu": mean, "bleu_std": std if len(dirs) > 1 else None,
                       "bleu_per_seed": per_seed, "seeds": [s for s, _ in seeds], "run_dir": dirs[0], "run_dirs": dirs,
                       "hyps": [scored[d][0] for d in dirs],
                       "stale": "; ".join(scored[d][2] for d in dirs if scored[d][2]) or None})
    return sorted(points, key=lambda p: p["value"])


def figure2_markdown(data: Dict) -> str:
    """Figure 2's points as a table: BLEU on the validation set, mean ± sample std over seeds."""
    def line(label, value, p):
        std = "" if p["bleu_std"] is None else f" ± {p['bleu_std']:.2f}"
        per = ", ".join(f"{s}: {b:.2f}" for s, b in zip(p["seeds"], p["bleu_per_seed"]))
        return f"| {label} | {value} | {len(p['seeds'])} | {p['bleu']:.2f}{std} | {per} |"

    out = ["| sweep | value | seeds | BLEU (mean ± std) | BLEU per seed |", "|---|---:|---:|---:|---|"]
    for sweep, label in (("windows", "1D-CSAN window"), ("heads", f"2D-CSAN heads (window {data['window_2d']})")):
        out += [line(label, p["value"], p) for p in data.get(sweep) or []]
    if data.get("baseline"):  # figure2 --baseline: scored like a point
        out.append(line("baseline", "-", data["baseline"]))
    out += ["", f"sacreBLEU BLEU (tokenize {data.get('tokenize', '13a')}) of each run's translations of the "
            "validation set (the paper's Figure 2); mean ± sample standard deviation (n-1) over seeds."]
    return "\n".join(out)


def system_hyps(ref_path: str, name: str, path: str, expect: Optional[Dict] = None) -> List[str]:
    """Figure 3's translations of one system: ``path`` a run folder (the subset evaluated on
    ``ref_path``; ``expect``: what the run must be, see :meth:`Run.expect`) or a file."""
    if os.path.isdir(path):
        run = Run(path)
        if expect is not None:
            run.expect(**expect)
        path, _ = run.hyp_for(ref_path)
    return read_text_lines(path, "system output")


def table1_points(table: Dict) -> List[Dict]:
    """Table 1's rows as plot points, the table's ``baseline`` (its system) first, the rest in the table's
    order: each seed's BLEU, their mean, the row's mark against the baseline (every seed pair; ``*`` /
    ``**``) and the pairs that carry it."""
    from .table1 import ROW_BY_KEY

    base = table.get("baseline")
    points = []
    for r in sorted(table["rows"], key=lambda r: r.get("system") != base):
        key = r.get("key") or r["system"]
        per_seed = list(r["bleu_per_seed"]) if "bleu_per_seed" in r else [r["bleu"]]
        points.append({"key": key, "name": ROW_BY_KEY[key].name if key in ROW_BY_KEY else key,
                       "bleu_per_seed": per_seed, "bleu": sum(per_seed) / len(per_seed), "mark": r.get("mark") or "",
                       "pairs_marked": r.get("pairs_marked"), "pairs": len(r["pairs"]) if r.get("pairs") else None})
    return points


def plot_table1(points: List[Dict], png_path: str, title: str) -> None:
    """Each row's BLEU per seed (dots) and mean (a dash), the first point's (the baseline's) mean as a
    line; above a row, its mark and how many seed pairs are significantly better than the baseline."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.75 * len(points)), 4.0))
    xs = list(range(len(points)))
    base = points[0]["bleu"]
    ax.scatter(xs, [p["bleu"] for p in points], marker="_", s=400, color="#2b6cb0", zorder=2, label="mean")
    for x, p in zip(xs, points):
        ax.scatter([x] * len(p["bleu_per_seed"]), p["bleu_per_seed"], color="black", s=12, zorder=3,
                   label="seeds" if x == 0 else None)
        if p["pairs"]:
            ax.annotate(f"{p['mark']} {p['pairs_marked']}/{p['pairs']}".strip(), (x, max(p["bleu_per_seed"])),
                        xytext=(0, 4), textcoords="offset points", ha="center", fontsize=7)
    ax.axhline(base, color="gray", linestyle="--", linewidth=0.9, label=f"{points[0]['name']} mean")
    ax.set_xticks(xs)
    ax.set_xticklabels([p["name"] for p in points], rotation=30, ha="right", fontsize=8)
    low = min(min(p["bleu_per_seed"]) for p in points)
    high = max(max(p["bleu_per_seed"]) for p in points)
    ax.set_ylim(low - 0.15 * (high - low) - 0.5, high + 0.15 * (high - low) + 0.5)
    ax.set_ylabel("BLEU (test)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    _save(fig, png_path)
    plt.close(fig)


def plot_figure2(windows: List[Dict], heads: List[Dict], png_path: str,
                 baseline_bleu: Optional[float] = None, window_2d: int = 11,
                 baseline_seeds: Optional[int] = None) -> None:
    plt = _pyplot()
    panels = [(p, t, x) for p, t, x in (
        (windows, "(a) 1D-CSANs", "window size (--csan-window)"),
        (heads, f"(b) 2D-CSANs, window {window_2d}", "attended heads (--csan-heads)")) if p]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for ax, (points, title, xlabel) in zip(axes[0], panels):
        ax.errorbar([p["value"] for p in points], [p["bleu"] for p in points], marker="o", capsize=3,
                    yerr=[p.get("bleu_std") or 0.0 for p in points])
        if baseline_bleu is not None:
            label = "baseline" if baseline_seeds is None else f"baseline (mean of {baseline_seeds} seed(s))"
            ax.axhline(baseline_bleu, color="gray", linestyle="--", label=label)
            ax.legend(fontsize=8)
        ax.set_xticks([p["value"] for p in points])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("BLEU (validation)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    _save(fig, png_path)
    plt.close(fig)
