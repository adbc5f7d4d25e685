"""Scores by input length built from whole documents (``CONCAT`` of ``recipes/lib/lengths.sh``):
for each k, the test set of consecutive, non-overlapping groups of k segments of one document
(``python -m fairseq_attn_recipes concat-test``), every run evaluated on it by the recipe's
evaluation step, and the main table of ``fairseq-attn-results`` computed on it (the same metrics,
paired tests against the baseline, marks and length ratio; with several seeds per system the
seeds table: mean ± sample std over seeds, a mark only when every seed pair is significant,
:mod:`.seeds`). This module gathers those tables:

* ``lengths.json`` gets ``concat``: ``{"documents": ..., "training": ..., "k": {k: {"n",
  "mean_src_words", "max_src_words", "src", "ref", "hyps": {system: path (one seed) or [paths]},
  "seed_hyps": {system: {seed: path}}, "systems": {system: {"seeds", "scores": {metric: score
  (the mean over seeds)}, "std": {metric: sample std or null}, "per_seed": {metric: [scores]},
  "intervals": {metric: {"bs_mean", "bs_ci"}} (one seed), "length_ratio", "length_ratio_std",
  "sys_len", "ref_len" (one seed), "p_bootstrap": {metric: p}, "p_ar": {metric: p} (one seed;
  the seeds' pairs in "pairs"), "marks": {metric: mark}, "segmentwise": {...}}}}}}`` (the baseline
  has no p-values). ``n``, the mean and the largest source length in words are counted on the
  source file the table scored, the length ratio is sacreBLEU's ``sys_len / ref_len``
  (:func:`fairseq_attn_records.metrics.length_ratio`).
* ``segmentwise`` (k > 1, with ``segmentwise_dir``): the same system's k = 1 outputs joined per
  group (:mod:`.segmentwise`): its scores and length ratio, and the paired test of the joined
  input's translation against it per seed.
* ``comet_window`` (with COMET): per k the inputs longer than COMET's encoder window (source,
  reference, each system's output), which COMET cuts without a word.
* ``lengths.md`` gets the table "Scores by input length" (one row per k, a segment-by-segment
  row under each k > 1, then the table of the joined input minus segment by segment), replacing
  the one a previous run wrote; ``--plot``: one panel per metric and one for the length ratio, k on
  the x axis, one line per system with its 95% bootstrap interval (several seeds: ± the sample std),
  its segment-by-segment line dashed (:func:`plot`).

Command line (called by lengths.sh): :mod:`fairseq_attn_reports.cli.by_concat`.
"""

import os
from typing import Dict, List, Mapping, Optional

from fairseq_attn_records import metrics as M
from fairseq_attn_records.output_files import staged
from fairseq_attn_records.text_inputs import read_text_lines

from .segmentwise import segmentwise_cell
from .significance import fmt_ratio
from .study_paths import load_table

HEADING = "### Scores by input length: k consecutive segments of one document as one input"


def system_cells(table: Dict) -> Dict[str, Dict]:
    """Per system of one k's main table (``fairseq-attn-results --json``, one seed or the seeds
    table of :mod:`.seeds`): ``seeds``, ``hyps`` (one per seed), ``scores`` (mean over seeds),
    ``std``, ``per_seed``, ``marks``, ``length_ratio`` (mean), ``length_ratio_std``, and the one
    seed's p-values, intervals and lengths, or the seeds' ``pairs``."""
    keys = table["metrics"]
    out = {}
    for i, r in enumerate(table["rows"]):
        if "n_seeds" in r:  # the seeds table
            m = r["metrics"]
            out[r["system"]] = {
                "seeds": r["seeds"], "hyps": r["hyps"], "scores": {k: m[k]["mean"] for k in keys},
                "std": {k: m[k]["std"] for k in keys}, "per_seed": {k: m[k]["per_seed"] for k in keys},
                "marks": {k: m[k]["mark"] for k in keys},
                "pairs": None if i == 0 else {k: m[k]["pairs"] for k in keys},
                "length_ratio": r["length_ratio_mean"], "length_ratio_std": r["length_ratio_std"],
                "length_ratio_per_seed": r["length_ratio_per_seed"]}
            continue
        out[r["system"]] = {
            "seeds": [(r.get("trained") or {}).get("seed")], "hyps": [r["hyp"]],
            "scores": {k: r["scores"][k]["score"] for k in keys}, "std": {k: None for k in keys},
            "per_seed": {k: [r["scores"][k]["score"]] for k in keys},
            "intervals": {k: {"bs_mean": r["scores"][k].get("bs_mean"), "bs_ci": r["scores"][k].get("bs_ci")}
                          for k in keys},
            "length_ratio": r["length_ratio"], "length_ratio_std": None,
            "length_ratio_per_seed": [r["length_ratio"]], "sys_len": r["sys_len"], "ref_len": r["ref_len"],
            "p_bootstrap": None if i == 0 else {k: r["scores"][k].get("p_bootstrap") for k in keys},
            "p_ar": None if i == 0 else {k: r["scores"][k].get("p_ar") for k in keys},
            "marks": r["marks"]}
    return out


def concat_entry(table: Dict) -> Dict:
    """One k's entry of ``concat`` from the main table (``fairseq-attn-results --json``) of that k."""
    words = [len(line.split()) for line in read_text_lines(table["src"], "source")]
    systems = system_cells(table)
    return {"n": len(words), "mean_src_words": sum(words) / len(words), "max_src_words": max(words),
            "src": table["src"], "ref": table["ref"],
            "hyps": {n: c["hyps"][0] if len(c["hyps"]) == 1 else c["hyps"] for n, c in systems.items()},
            "seed_hyps": {n: dict(zip(map(str, c["seeds"]), c["hyps"])) for n, c in systems.items()},
            "baseline": table["baseline"], "metrics": table["metrics"], "labels": table["labels"],
            "tokenize": table.get("tokenize"),
            "bs_samples": table["bs_samples"], "ar_trials": table["ar_trials"], "systems": systems,
            "n_seeds": max(len(c["seeds"]) for c in systems.values())}


def add_segmentwise(concat: Dict, first_lines: Mapping[str, List[int]], out_dir: str, tokenize: str = "13a",
                    comet=None) -> None:
    """``segmentwise`` of every system at every k > 1 (:func:`.segmentwise.segmentwise_cell`):
    the k = 1 outputs of the same seed joined per group (``first_lines[k]``: concat-test's first
    line of each group), written under ``out_dir/k<k>/<system>/``. Needs k = 1 in ``concat``."""
    if "1" not in concat["k"]:
        raise ValueError("the segment-by-segment rows join the outputs of k = 1: give its table (--k 1=...)")
    one = concat["k"]["1"]["systems"]
    for k, entry in concat["k"].items():
        if k == "1":
            continue
        if k not in first_lines:
            raise ValueError(f"k = {k}: concat-test's record (--info) has no groups of {k}")
        refs = read_text_lines(entry["ref"], "reference")
        sources = read_text_lines(entry["src"], "source") if comet is not None else None
        corpus = [m for m in entry["metrics"] if M.get(m).level == "corpus"]
        for name, cell in entry["systems"].items():
            if name not in one:
                raise ValueError(f"k = {k}: system {name!r} has no table at k = 1")
            k1 = dict(zip(one[name]["seeds"], one[name]["hyps"]))
            if sorted(map(str, k1)) != sorted(map(str, cell["seeds"])):
                raise ValueError(f"k = {k}: system {name!r} has seeds {cell['seeds']}, but {one[name]['seeds']} at k = 1")
            runs = [(seed, k1[seed], hyp) for seed, hyp in zip(cell["seeds"], cell["hyps"])]
            cell["segmentwise"] = segmentwise_cell(
                refs, sources, int(k), first_lines[k], runs, os.path.join(out_dir, f"k{k}", name),
                corpus, tokenize, entry["bs_samples"], entry["ar_trials"], comet)


def add_comet_window(concat: Dict, comet) -> None:
    """``comet_window`` of every k: COMET's encoder window (model tokens) and how many sources,
    references and outputs of each system (per seed) are longer, and so cut by COMET."""
    for entry in concat["k"].values():
        src = read_text_lines(entry["src"], "source")
        ref = read_text_lines(entry["ref"], "reference")
        hyps = {n: [comet.over_window(read_text_lines(h, "system output")) for h in c["hyps"]]
                for n, c in entry["systems"].items()}
        entry["comet_window"] = {"tokens": comet.window(), "src": comet.over_window(src),
                                 "ref": comet.over_window(ref), "hyps": hyps}


def concat_section(tables: Mapping[int, Dict], info: Optional[Dict], training: Optional[str] = None) -> Dict:
    """``concat`` of lengths.json: ``tables`` {k: main table of that k}; ``info``: concat-test's record;
    ``training``: what the systems were trained on (:func:`training_note`)."""
    out = {"documents": (info or {}).get("documents"), "n_documents": (info or {}).get("n_documents"),
           "training": training, "k": {}}
    for k in sorted(tables):
        entry = concat_entry(tables[k])
        entry["n_documents"] = ((info or {}).get("k") or {}).get(str(k), {}).get("documents")
        out["k"][str(k)] = entry
    return out


def training_note(prepare: Dict) -> str:
    """What the study's systems were trained on, from their data's ``prepare.json``: the cap on
    the original pairs and the joined pairs of TRAIN_CONCAT."""
    settings, pairs = prepare.get("settings") or {}, prepare.get("train_pairs") or {}
    cap = settings.get("TRAIN_MAX_LEN")
    out = (f"Training pairs: the original pairs of at most {cap} source words" if cap else
           "Training pairs: every original pair (no length cap)")
    out += f" ({pairs.get('clean')} after cleaning)"
    joined = pairs.get("concat")
    if joined:
        how = ("consecutive pairs of one document" if joined.get("documents") else
               f"random pairs (seed {joined.get('seed')}, no document ids)")
        ks = ", ".join(f"k = {k}: {c['n']:,}" for k, c in joined["k"].items())
        out += (f", and TRAIN_CONCAT={settings.get('TRAIN_CONCAT')}: each also joined with {how}, the joined pairs "
                f"added ({ks} joined pairs; the cap applies to the original pairs, a joined pair has up to k times "
                f"as many words)")
    return out + "."


def _cell(c: Dict, key: str) -> str:
    nd = M.digits(key)
    std = c["std"].get(key)
    return f"{c['scores'][key]:.{nd}f}" + ("" if std is None else f" ± {std:.{nd}f}")


def _ratio(c: Dict) -> str:
    std = c.get("length_ratio_std")
    return fmt_ratio(c.get("length_ratio")) + ("" if std is None else f" ± {std:.3f}")


def _window_cell(e: Dict, name: str) -> str:
    w = e.get("comet_window")
    if not w:
        return ""
    hyp = max(w["hyps"][name])
    return f" [cut: {w['src']}/{w['ref']}/{hyp}]" if (w["src"] or w["ref"] or hyp) else ""


def format_markdown(concat: Dict) -> str:
    """One row per k: n, source words (mean / largest), each metric per system with its mark, and
    each system's length ratio; under each k > 1 the segment-by-segment row; then the joined input
    minus segment by segment per system and k, with the paired test's mark."""
    ks = list(concat["k"])
    if not ks:
        return HEADING + "\n\n(no k evaluated)"
    first = concat["k"][ks[0]]
    names, keys, labels = list(first["systems"]), first["metrics"], first["labels"]
    seeds = max(e.get("n_seeds", 1) for e in concat["k"].values())
    head = "| k | n | source words (mean / max) |" + "".join(f" {labels[k]} {n} |" for k in keys for n in names)
    head += "".join(f" Len. ratio {n} |" for n in names)
    rule = "|---|---:|---:|" + "---:|" * (len(keys) * len(names) + len(names))
    lines = [HEADING, "", head, rule]
    has_seg = False
    for k in ks:
        e = concat["k"][k]
        row = f"| {k} | {e['n']} | {e['mean_src_words']:.1f} / {e['max_src_words']} |"
        for key in keys:
            row += "".join(f" {_cell(e['systems'][n], key)}{e['systems'][n]['marks'][key]}"
                           f"{_window_cell(e, n) if key == 'comet' else ''} |" for n in names)
        row += "".join(f" {_ratio(e['systems'][n])} |" for n in names)
        lines.append(row)
        segs = [e["systems"][n].get("segmentwise") for n in names]
        if all(segs):
            has_seg = True
            row = f"| {k}, segment by segment | {e['n']} | |"
            for key in keys:
                row += "".join(f" {_cell(s, key)} |" if key in s["scores"] else " - |" for s in segs)
            row += "".join(f" {_ratio(s)} |" for s in segs)
            lines.append(row)
    docs = concat.get("documents") or "?"
    std = " Scores: mean ± sample standard deviation (n-1) over seeds." if seeds > 1 else ""
    rule_text = ("marks as in the seeds table: better than the baseline with p < 0.05 / p < 0.01 in both paired "
                 "tests for EVERY pair of a system seed and a baseline seed" if seeds > 1 else
                 "marks as in the main table")
    lines += ["", f"Inputs of k: the test set as consecutive, non-overlapping groups of k segments of one document "
              f"(sources joined by a space, references likewise; a group left short at a document's end is "
              f"dropped). Documents: {docs}" + _count(concat.get("n_documents")),
              f"Each k scored and tested against the baseline ({first['baseline']}) as the main table "
              f"(sacreBLEU's PairedTest, {first['bs_samples']} resamples / {first['ar_trials']} trials); "
              f"{rule_text}; p-values in lengths.json (concat).{std}",
              "Len. ratio: output / reference length in tokens (sacreBLEU's sys_len / ref_len); below 1 the "
              "outputs are shorter than the references.",
              "Compare scores within a k, not across: BLEU and chrF++ match n-grams anywhere within a segment, "
              "so the same outputs score higher joined into longer segments."]
    if has_seg:
        lines.append("Segment by segment: the same system's outputs of the k segments translated one by one "
                     "(its k = 1 outputs) joined as the inputs were, scored against the joined references.")
    if any(e.get("comet_window") for e in concat["k"].values()):
        w = next(e["comet_window"] for e in concat["k"].values() if e.get("comet_window"))
        lines.append(f"[cut: s/r/o]: COMET reads at most {w['tokens']} model tokens of each source, reference "
                     f"and output and cuts the rest without a word: s sources, r references and o outputs (the "
                     f"most of any seed) of that k are longer, so their COMET scores only their beginning.")
    if concat.get("training"):
        lines.append(concat["training"])
    if has_seg:
        lines += ["", segmentwise_markdown(concat)]
    return "\n".join(lines)


def segmentwise_markdown(concat: Dict) -> str:
    """Per k > 1 and system: the joined input's score minus segment by segment, with the mark of
    the paired test when it holds on every seed (either direction; the sign says which)."""
    ks = [k for k in concat["k"] if k != "1"]
    first = concat["k"][ks[0]]
    names, labels = list(first["systems"]), first["labels"]
    keys = [k for k in first["metrics"] if k in first["systems"][names[0]]["segmentwise"]["scores"]]
    lines = ["Joined input minus segment by segment (Δ, mean over seeds):", "",
             "| k |" + "".join(f" Δ {labels[k]} {n} |" for k in keys for n in names)
             + "".join(f" Δ len. ratio {n} |" for n in names),
             "|---|" + "---:|" * (len(keys) * len(names) + len(names))]
    for k in ks:
        e = concat["k"][k]
        row = f"| {k} |"
        for key in keys:
            for n in names:
                s = e["systems"][n]["segmentwise"]
                row += f" {s['delta'][key]:+.{M.digits(key)}f}{s['marks'][key]} |"
        for n in names:
            joined, seg = e["systems"][n]["length_ratio"], e["systems"][n]["segmentwise"]["length_ratio"]
            row += " - |" if joined is None or seg is None else f" {joined - seg:+.3f} |"
        lines.append(row)
    lines += ["", "`*` / `**`: the joined input's translation and the segment-by-segment outputs differ with "
              "p < 0.05 / p < 0.01 in both paired bootstrap resampling and approximate randomisation (the "
              "segment-by-segment outputs as the baseline), on every seed and in the same direction; the sign of Δ "
              "says which is better. Per-seed p-values in lengths.json (concat.k.<k>.systems.<name>.segmentwise)."]
    return "\n".join(lines)


def _count(n: Optional[int]) -> str:
    return "." if not n else f" ({n} document{'s' if n > 1 else ''})."


def replace_section(md: str, section: str) -> str:
    """``md`` with its per-k section (from :data:`HEADING` to the end) replaced by ``section``."""
    head = md.split(HEADING)[0].rstrip("\n")
    return head + "\n\n" + section + "\n"


def load_tables(specs: List[str]) -> Dict[int, Dict]:
    """``K=FILE.json`` each: {k: the main table in that JSON}; ValueError naming the argument."""
    out = {}
    for spec in specs:
        k, sep, path = spec.partition("=")
        if not sep or not k.isdigit():
            raise ValueError(f"--k {spec}: give K=FILE.json")
        out[int(k)] = load_table(path)
    return out


def plot(concat: Dict, png_path: str) -> None:
    """Score against k, one panel per metric and one for the length ratio, one line per system
    (error bars: sacreBLEU's 95% bootstrap interval of that k, or ± the sample std over seeds), and
    its segment-by-segment line dashed from k = 1. Written whole (tmp, then rename)."""

    from .figures import _pyplot

    ks = list(concat["k"])
    if not ks:
        return
    plt = _pyplot()
    first = concat["k"][ks[0]]
    names, keys, labels = list(first["systems"]), first["metrics"], first["labels"]
    panels = keys + ["length_ratio"]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.2), squeeze=False)
    xs = list(range(len(ks)))
    for ax, key in zip(axes[0], panels):
        for s_i, name in enumerate(names):
            cells = [concat["k"][k]["systems"][name] for k in ks]
            shift = [x + 0.05 * (s_i - 0.5 * (len(names) - 1)) for x in xs]
            y, err = _points(cells, key)
            ax.errorbar(shift, y, yerr=err, marker="o", markersize=4, capsize=3, color=f"C{s_i % 10}", label=name)
            segs = [(x, c) for x, c, k in zip(shift, cells, ks) if k != "1" and c.get("segmentwise")]
            if segs and (key == "length_ratio" or key in segs[0][1]["segmentwise"]["scores"]):
                start = [(x, c) for x, c, k in zip(shift, cells, ks) if k == "1"]  # k = 1 is its own segment-wise point
                line = start + [(x, c["segmentwise"]) for x, c in segs]
                sy = [c["length_ratio"] if key == "length_ratio" else c["scores"][key] for _, c in line]
                ax.plot([x for x, _ in line], sy, linestyle="--", marker="x", markersize=4, color=f"C{s_i % 10}",
                        label=f"{name}, segment by segment")
        if key == "length_ratio":
            ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xticks(xs)
        ax.set_xticklabels([f"k={k}\n{concat['k'][k]['mean_src_words']:.0f} words" for k in ks], fontsize=8)
        ax.set_xlabel("segments per input (mean source words)")
        ax.set_ylabel("output / reference length" if key == "length_ratio" else labels[key])
        ax.set_title("length ratio by k" if key == "length_ratio" else f"{labels[key]} by k")
        ax.grid(alpha=0.3)
    handles, shown = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, shown, loc="lower center", ncol=min(len(shown), 6), fontsize=8)
    spread = ("± sample std over seeds" if max(e.get("n_seeds", 1) for e in concat["k"].values()) > 1
              else "95% bootstrap interval")
    fig.suptitle(f"inputs of k consecutive segments of one document; error bars: {spread}; dashed: segment by "
                 f"segment (the k = 1 outputs joined)", fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    with staged(png_path, ".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)


def _points(cells: List[Dict], key: str):
    """(values, error bars) of one system over k: the length ratio (± std over seeds), or a metric
    with its 95% bootstrap interval (one seed) or ± its sample std over seeds."""
    if key == "length_ratio":
        y = [c["length_ratio"] for c in cells]
        stds = [c.get("length_ratio_std") for c in cells]
        return y, None if all(s is None for s in stds) else [s or 0.0 for s in stds]
    y = [c["scores"][key] for c in cells]
    if any(c["std"].get(key) is not None for c in cells):
        return y, [c["std"].get(key) or 0.0 for c in cells]
    iv = [(c.get("intervals") or {}).get(key) or {"bs_mean": None} for c in cells]
    return y, [[0.0 if i["bs_mean"] is None else max(0.0, v - i["bs_mean"] + i["bs_ci"]) for v, i in zip(y, iv)],
               [0.0 if i["bs_mean"] is None else max(0.0, i["bs_mean"] + i["bs_ci"] - v) for v, i in zip(y, iv)]]
