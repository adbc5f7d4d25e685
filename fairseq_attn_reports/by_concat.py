"""Scores by input length built from whole documents (``CONCAT`` of ``recipes/lib/lengths.sh``):
for each k, the test set of consecutive, non-overlapping groups of k segments of one document
(``python -m fairseq_attn_recipes concat-test``), every run evaluated on it by the recipe's
evaluation step, and the main table of ``fairseq-attn-results`` computed on it (the same metrics,
paired tests against the baseline, marks and length ratio). This module gathers those tables:

* ``lengths.json`` gets ``concat``: ``{"documents": ..., "k": {k: {"n", "mean_src_words",
  "max_src_words", "src", "ref", "hyps": {system: path}, "systems": {system: {"scores":
  {metric: score}, "intervals": {metric: {"bs_mean", "bs_ci"}}, "length_ratio", "sys_len", "ref_len", "p_bootstrap": {metric: p}, "p_ar":
  {metric: p}, "marks": {metric: mark}}}}}}`` (the baseline has no p-values). ``n``, the mean and
  the largest source length in words are counted on the source file the table scored, the
  length ratio is sacreBLEU's ``sys_len / ref_len`` (:func:`fairseq_attn_records.metrics.length_ratio`).
* ``lengths.md`` gets the table "Scores by input length" (one row per k), replacing the one a
  previous run wrote; ``--plot``: one panel per metric and one for the length ratio, k on the x
  axis, one line per system with its 95% bootstrap interval (:func:`plot`).

Command line (called by lengths.sh): :mod:`fairseq_attn_reports.cli.by_concat`.
"""

import json
from typing import Dict, List, Mapping, Optional

from fairseq_attn_records import metrics as M
from fairseq_attn_records.output_files import staged
from fairseq_attn_records.text_inputs import read_text_lines

from .significance import fmt_ratio

HEADING = "### Scores by input length: k consecutive segments of one document as one input"


def concat_entry(table: Dict) -> Dict:
    """One k's entry of ``concat`` from the main table (``fairseq-attn-results --json``) of that k."""
    words = [len(line.split()) for line in read_text_lines(table["src"], "source")]
    rows = table["rows"]
    systems = {}
    for i, r in enumerate(rows):
        keys = table["metrics"]
        systems[r["system"]] = {
            "scores": {k: r["scores"][k]["score"] for k in keys},
            "intervals": {k: {"bs_mean": r["scores"][k].get("bs_mean"), "bs_ci": r["scores"][k].get("bs_ci")}
                          for k in keys},
            "length_ratio": r["length_ratio"], "sys_len": r["sys_len"], "ref_len": r["ref_len"],
            "p_bootstrap": None if i == 0 else {k: r["scores"][k].get("p_bootstrap") for k in keys},
            "p_ar": None if i == 0 else {k: r["scores"][k].get("p_ar") for k in keys},
            "marks": r["marks"]}
    return {"n": len(words), "mean_src_words": sum(words) / len(words), "max_src_words": max(words),
            "src": table["src"], "ref": table["ref"], "hyps": {r["system"]: r["hyp"] for r in rows},
            "baseline": table["baseline"], "metrics": table["metrics"], "labels": table["labels"],
            "bs_samples": table["bs_samples"], "ar_trials": table["ar_trials"], "systems": systems}


def concat_section(tables: Mapping[int, Dict], info: Optional[Dict]) -> Dict:
    """``concat`` of lengths.json: ``tables`` {k: main table of that k}; ``info``: concat-test's record."""
    out = {"documents": (info or {}).get("documents"), "n_documents": (info or {}).get("n_documents"),
           "k": {}}
    for k in sorted(tables):
        entry = concat_entry(tables[k])
        entry["n_documents"] = ((info or {}).get("k") or {}).get(str(k), {}).get("documents")
        out["k"][str(k)] = entry
    return out


def format_markdown(concat: Dict) -> str:
    """One row per k: n, source words (mean / largest), each metric per system with its mark, and
    each system's length ratio."""
    ks = list(concat["k"])
    if not ks:
        return HEADING + "\n\n(no k evaluated)"
    first = concat["k"][ks[0]]
    names, keys, labels = list(first["systems"]), first["metrics"], first["labels"]
    head = "| k | n | source words (mean / max) |" + "".join(f" {labels[k]} {n} |" for k in keys for n in names)
    head += "".join(f" Len. ratio {n} |" for n in names)
    rule = "|---:|---:|---:|" + "---:|" * (len(keys) * len(names) + len(names))
    lines = [HEADING, "", head, rule]
    for k in ks:
        e = concat["k"][k]
        row = f"| {k} | {e['n']} | {e['mean_src_words']:.1f} / {e['max_src_words']} |"
        for key in keys:
            nd = M.digits(key)
            row += "".join(f" {e['systems'][n]['scores'][key]:.{nd}f}{e['systems'][n]['marks'][key]} |" for n in names)
        row += "".join(f" {fmt_ratio(e['systems'][n]['length_ratio'])} |" for n in names)
        lines.append(row)
    docs = concat.get("documents") or "?"
    lines += ["", f"Inputs of k: the test set as consecutive, non-overlapping groups of k segments of one document "
              f"(sources joined by a space, references likewise; a group left short at a document's end is "
              f"dropped). Documents: {docs}" + _count(concat.get("n_documents")),
              f"Each k scored and tested against the baseline ({first['baseline']}) as the main table "
              f"(sacreBLEU's PairedTest, {first['bs_samples']} resamples / {first['ar_trials']} trials); marks as in "
              f"the main table; p-values in lengths.json (concat).",
              "Len. ratio: output / reference length in tokens (sacreBLEU's sys_len / ref_len); below 1 the "
              "outputs are shorter than the references."]
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
        with open(path, encoding="utf-8") as f:
            out[int(k)] = json.load(f)
    return out


def plot(concat: Dict, png_path: str) -> None:
    """Score against k, one panel per metric and one for the length ratio, one line per system
    (error bars: sacreBLEU's 95% bootstrap interval of that k). Written whole (tmp, then rename)."""

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
            if key == "length_ratio":
                y, err = [c["length_ratio"] for c in cells], None
            else:
                y = [c["scores"][key] for c in cells]
                iv = [c["intervals"][key] for c in cells]
                err = [[0.0 if i["bs_mean"] is None else max(0.0, v - i["bs_mean"] + i["bs_ci"]) for v, i in zip(y, iv)],
                       [0.0 if i["bs_mean"] is None else max(0.0, i["bs_mean"] + i["bs_ci"] - v) for v, i in zip(y, iv)]]
            ax.errorbar([x + 0.05 * (s_i - 0.5 * (len(names) - 1)) for x in xs], y, yerr=err, marker="o",
                        markersize=4, capsize=3, color=f"C{s_i % 10}", label=name)
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
    fig.suptitle("inputs of k consecutive segments of one document; error bars: 95% bootstrap interval",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    with staged(png_path, ".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
