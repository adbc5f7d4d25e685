"""Concatenation training against training on the pairs alone (``TRAIN_CONCAT`` of
``recipes/lib/lengths.sh``): the difference per system and k between two studies' per-k tables
(``concat`` of their ``lengths.json``, :mod:`.by_concat`), the study without the joined pairs as
the baseline.

Per system and k, every seed of the system trained with the joined pairs is tested against
every seed trained without them (sacreBLEU's paired bootstrap and approximate randomisation on
the same joined inputs, :func:`.significance.paired_tests`), as the seeds table tests a system
against the baseline; the difference gets a mark only when every pair is significant in the same
direction (:func:`.segmentwise.signed_mark`, the all-pairs rule), the sign saying which
condition is better.
"""

from typing import Dict, List, Optional

from fairseq_attn_records import metrics as M
from fairseq_attn_records.text_inputs import read_text_lines

from .segmentwise import pair_mark, signed_mark
from .significance import paired_tests

HEADING = "### Concatenation training minus training on the pairs alone"


def condition_difference(without: Dict, with_: Dict, tokenize: str = "13a", comet=None) -> Dict:
    """``without`` / ``with_``: the ``concat`` sections of the two studies. Returns ``{"k": {k:
    {system: {"delta": {metric}, "pairs": {metric: [...]}, "marks", "better", "length_ratio":
    [without, with]}}}, "metrics", "labels", "training": [without's, with's]}`` over the k and the
    systems both hold; ValueError when a k's references differ."""
    out = {"k": {}, "training": [without.get("training"), with_.get("training")], "metrics": None, "labels": None}
    for k in [k for k in without["k"] if k in with_["k"]]:
        a, b = without["k"][k], with_["k"][k]
        refs = read_text_lines(a["ref"], "reference")
        if read_text_lines(b["ref"], "reference") != refs:
            raise ValueError(f"k = {k}: {a['ref']} and {b['ref']} are not the same references: the two studies "
                             f"were evaluated on other test sets")
        sources = read_text_lines(a["src"], "source") if comet is not None else None
        keys = [m for m in a["metrics"] if m in b["metrics"] and (M.get(m).level == "corpus" or comet is not None)]
        out["k"][k] = {}
        stats = M.SentenceStats(refs, tokenize)  # each output's statistics extracted once for all its pairs
        for name in [n for n in a["systems"] if n in b["systems"]]:
            A, B = a["systems"][name], b["systems"][name]
            pairs: Dict[str, List[Dict]] = {}
            for seed_a, hyp_a in zip(A["seeds"], A["hyps"]):
                res = paired_tests(refs, [("without", read_text_lines(hyp_a, "system output"))]
                                   + [(f"with, seed {s}", read_text_lines(h, "system output"))
                                      for s, h in zip(B["seeds"], B["hyps"])],
                                   tokenize, a["bs_samples"], a["ar_trials"], metrics=[m for m in keys if m != "comet"],
                                   comet=comet if "comet" in keys else None, sources=sources,
                                   stats=stats)
                out["metrics"], out["labels"] = res["metrics"], res["labels"]
                base = res["systems"][0]["scores"]
                for seed_b, cell in zip(B["seeds"], res["systems"][1:]):
                    for key in res["metrics"]:
                        c = cell["scores"][key]
                        pairs.setdefault(key, []).append({
                            "seed": seed_b, "seed_without": seed_a, "delta": c["score"] - base[key]["score"],
                            "p_bootstrap": c.get("p_bootstrap"), "p_ar": c.get("p_ar"), "mark": pair_mark(c)})
            row = {"delta": {}, "pairs": pairs, "marks": {}, "better": {},
                   "length_ratio": [A.get("length_ratio"), B.get("length_ratio")]}
            for key, ps in pairs.items():
                row["delta"][key] = B["scores"][key] - A["scores"][key]
                mark, side = signed_mark(key, [(p["delta"], p["mark"]) for p in ps])
                row["marks"][key], row["better"][key] = mark, {"A": "with", "B": "without"}.get(side)
            out["k"][k][name] = row
    return out


def format_markdown(diff: Dict, concat: Optional[str] = None) -> str:
    """One row per k: each metric's difference per system with its mark, and the length ratio's."""
    ks = list(diff["k"])
    if not ks:
        return HEADING + "\n\n(no k in both studies)"
    names, keys, labels = list(diff["k"][ks[0]]), diff["metrics"], diff["labels"]
    title = f"{HEADING}{f' (TRAIN_CONCAT={concat})' if concat else ''}"
    lines = [title, "", "| k |" + "".join(f" Δ {labels[k]} {n} |" for k in keys for n in names)
             + "".join(f" len. ratio {n} |" for n in names),
             "|---|" + "---:|" * (len(keys) * len(names) + len(names))]
    for k in ks:
        row = f"| {k} |"
        for key in keys:
            row += "".join(f" {diff['k'][k][n]['delta'][key]:+.{M.digits(key)}f}{diff['k'][k][n]['marks'][key]} |"
                           for n in names)
        for n in names:
            a, b = diff["k"][k][n]["length_ratio"]
            row += " - |" if a is None or b is None else f" {a:.3f} → {b:.3f} |"
        lines.append(row)
    lines += ["", "Δ: the score with the joined training pairs minus without them (means over seeds); len. ratio: "
              "without → with. `*` / `**`: p < 0.05 / p < 0.01 in both paired bootstrap resampling and approximate "
              "randomisation for EVERY pair of a seed trained with and a seed trained without, in the same "
              "direction (the sign of Δ says which is better); per-pair p-values in the JSON."]
    lines += [f"Without: {t}" if i == 0 else f"With: {t}" for i, t in enumerate(diff["training"]) if t]
    return "\n".join(lines)
