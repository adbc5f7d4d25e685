"""Segment by segment: the reference point of every joined input of the long-input study.

For an input of k segments (a group of ``concat-test``: the k consecutive test lines starting
at its first line), the same system's translations of the k segments one by one (its outputs
on the whole test set, k = 1) joined by one space, as the group's source and reference are
joined. Scored against the joined references, it says how much of a system's loss on the
joined input is the long input itself; it costs no decoding.

* :func:`joined_outputs`: the k = 1 outputs grouped as the inputs were.
* :func:`segmentwise_cell`: per seed, the joined k = 1 outputs scored and the system's
  translation of the joined inputs tested against them (sacreBLEU's paired bootstrap and
  approximate randomisation, :func:`.significance.paired_tests`, the segment-wise outputs as the
  baseline); over seeds, mean ± sample std and a mark that holds on every seed
  (:func:`signed_mark`, the all-pairs rule of :func:`.seeds.all_pairs_mark`).
"""

import os
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_attn_records import metrics as M
from fairseq_attn_records.output_files import write_lines
from fairseq_attn_records.text_inputs import read_text_lines

from .curves import mean_std
from .seeds import all_pairs_mark
from .significance import paired_tests


def joined_outputs(outputs: Sequence[str], first_lines: Sequence[int], k: int) -> List[str]:
    """The k = 1 ``outputs`` of each group of k lines starting at ``first_lines`` (1-based),
    joined by one space; ValueError when a group runs past the outputs."""
    out = []
    for first in first_lines:
        if first < 1 or first - 1 + k > len(outputs):
            raise ValueError(f"a group of {k} lines from line {first} runs past the {len(outputs)} outputs of k = 1")
        out.append(" ".join(outputs[first - 1:first - 1 + k]))
    return out


def signed_mark(key: str, deltas_marks: Sequence[Tuple[float, str]]) -> Tuple[str, Optional[str]]:
    """(mark, which is better) of a two-sided comparison over seeds: ``deltas_marks`` holds, per
    seed (or seed pair), the difference A - B on ``key`` and the significance mark of its paired
    test (direction-free). The mark holds when every seed is significant in the same direction
    (the all-pairs rule); ("", None) otherwise."""
    higher = M.higher_is_better(key)
    mark = all_pairs_mark(deltas_marks, higher)
    if mark:
        return mark, "A"
    mark = all_pairs_mark([(-d, m) for d, m in deltas_marks], higher)
    return (mark, "B") if mark else ("", None)


def pair_mark(cell: Dict) -> str:
    """The significance mark of one paired test, whichever side is better ('' for identical outputs;
    equal scores have p = 1, :mod:`fairseq_attn_records.metrics`)."""
    if cell.get("same_as_baseline", False):
        return ""
    return M.significance_mark([cell.get("p_bootstrap"), cell.get("p_ar")])


def segmentwise_cell(refs: Sequence[str], sources: Optional[Sequence[str]], k: int, first_lines: Sequence[int],
                     runs: Sequence[Tuple[Optional[int], str, str]], out_dir: str, metrics: Sequence[str],
                     tokenize: str = "13a", bs_samples: int = 1000, ar_trials: int = 10000, comet=None) -> Dict:
    """One system at one k. ``runs``: (seed, its k = 1 outputs, its outputs on the joined inputs)
    per seed; the joined k = 1 outputs are written to ``out_dir/seed<s>.txt`` (``out_dir/hyp.txt``
    for one unnamed seed). Returns ``{"hyps", "seeds", "scores", "std", "per_seed",
    "length_ratio", "length_ratio_std", "length_ratio_per_seed", "delta", "tests", "marks",
    "better"}``: scores of the segment-wise outputs (mean over seeds), ``delta`` the joined
    input's score minus the segment-wise one (mean over seeds), ``tests`` per metric the
    per-seed paired tests, ``marks`` / ``better`` ("joined" or "segment-wise") per metric."""
    os.makedirs(out_dir, exist_ok=True)
    per_seed_scores: Dict[str, List[float]] = {}
    deltas: Dict[str, List[float]] = {}
    tests: Dict[str, List[Dict]] = {}
    ratios, paths, keys, labels = [], [], None, None
    stats = M.SentenceStats(refs, tokenize)  # the references' n-grams extracted once for every seed
    for seed, k1_path, joined_path in runs:
        seg = joined_outputs(read_text_lines(k1_path, "system output"), first_lines, k)
        joined = read_text_lines(joined_path, "system output")
        if len(seg) != len(refs) or len(joined) != len(refs):
            raise ValueError(f"k = {k}: {len(refs)} joined references, {len(seg)} groups of k = 1 outputs "
                             f"({k1_path}), {len(joined)} outputs of the joined inputs ({joined_path})")
        path = os.path.join(out_dir, "hyp.txt" if seed is None and len(runs) == 1 else f"seed{seed}.txt")
        write_lines(path, seg)
        paths.append(path)
        res = paired_tests(refs, [("segment by segment", seg), ("joined input", joined)], tokenize, bs_samples,
                           ar_trials, metrics=metrics, comet=comet, sources=sources, stats=stats)
        keys, labels = res["metrics"], res["labels"]
        base, cell = res["systems"]
        ratios.append(base["length_ratio"])
        for key in keys:
            s, j = base["scores"][key]["score"], cell["scores"][key]
            per_seed_scores.setdefault(key, []).append(s)
            deltas.setdefault(key, []).append(j["score"] - s)
            tests.setdefault(key, []).append({"seed": seed, "segmentwise": s, "joined": j["score"],
                                              "delta": j["score"] - s, "p_bootstrap": j.get("p_bootstrap"),
                                              "p_ar": j.get("p_ar"), "mark": pair_mark(j)})
    out = {"hyps": paths, "seeds": [s for s, _, _ in runs], "metrics": keys, "labels": labels,
           "scores": {}, "std": {}, "per_seed": per_seed_scores, "delta": {}, "tests": tests,
           "marks": {}, "better": {}, "length_ratio_per_seed": ratios}
    for key in keys:
        mean, std = mean_std(per_seed_scores[key])
        out["scores"][key] = mean
        out["std"][key] = std if len(runs) > 1 else None
        out["delta"][key] = mean_std(deltas[key])[0]
        mark, side = signed_mark(key, [(t["delta"], t["mark"]) for t in tests[key]])
        out["marks"][key] = mark
        out["better"][key] = {"A": "joined", "B": "segment-wise"}.get(side)
    known = [r for r in ratios if r is not None]
    lr_mean, lr_std = mean_std(known) if len(known) == len(ratios) else (None, None)
    out["length_ratio"], out["length_ratio_std"] = lr_mean, (lr_std if len(runs) > 1 else None)
    return out
