"""The CSAN paper's claims (Yang et al., 2019, sections 5.1 and 5.2), each given a verdict from the
outputs of a finished Table 1 and Figure 2 (``fairseq-attn-paper claims``).

**A comparison** "A is better than B" (:class:`Tester`): every seed of A tested against every seed
of B on BLEU with paired bootstrap resampling and paired approximate randomisation, the seeds
table's own test (:func:`.seeds.score_seeds`), and the other way where A is not better in every pair:

* *holds*: A is significantly better (p < 0.05 in both tests) in EVERY seed pair -- the mark the
  seeds table gives A against B;
* *does not hold*: B is significantly better than A in every seed pair;
* *not resolved at this scale*: anything else -- the pairs disagree, or no difference is significant
  (more seeds, a larger test set or a larger model may resolve it).

**A claim** made of several comparisons (or parts) holds when every one holds, does not hold when
one does not, and is not resolved otherwise; a claim about rows or points the study lacks cannot
hold (it is not resolved, naming them). The claims and their comparisons:

1. ``improve`` -- "all the models improve translation quality": each paper row over the baseline.
2. ``outperform`` -- "our models outperform all the existing works": 1D- and 2D-CSAN over each
   re-implemented method (Bi_Direct, Rel_Pos, Neighbor, Local_Hard, Local_Soft, Block, Cnns).
3. ``csan_over_cnns`` -- "CSans achieve better performance than Cnns": both CSAN rows over Cnns.
4. ``parameter_free`` -- "parameter-free ... only marginally affect training efficiency": per CSAN
   row, its parameters counted in its runs equal the baseline's (else it does not hold), and its
   speed against the baseline's. Given a side-by-side benchmark (:mod:`.side_by_side`, ``--speed``),
   its rounds are paired measurements: the speed holds when the 95 % distribution-free interval of
   the median round slowdown (:func:`median_interval`, the sign test's) lies at or below
   :data:`MARGINAL_SLOWDOWN`, does not hold when it lies above, and is not resolved when it
   straddles it or there are fewer than 6 rounds. One disturbed round cannot decide it. Without a
   benchmark, the seed pairs of the runs' own steps per second decide: every pair at most
   :data:`MARGINAL_SLOWDOWN` slower holds, every pair slower does not hold, anything else is not
   resolved. They were measured on a shared machine, so they decide nothing when a run's epochs
   disagree by more than :data:`MAX_EPOCH_UPS_RATIO` (other work ran beside it) or the table
   records no per-epoch figures.
5. ``window_11`` -- Figure 2a, "the local size with 11 is superior to other settings": window 11
   over each other window.
6. ``heads`` -- Figure 2b, "by considering the features across heads (> 1), 2D-CSans further
   improve ...; when the number of heads goes up, the quality drops": (a) the smallest area above
   1 over area 1, and (b) that area over the largest area (needs two areas above 1). Fixed in
   advance: no area is chosen by its score.
"""

from collections import OrderedDict
from math import comb
from statistics import median
from typing import Dict, List, Optional, Sequence, Tuple

from .seeds import score_seeds
from .side_by_side import describe as describe_bench
from .table1 import BASELINE, ROW_BY_KEY, ROWS

HOLDS, FAILS, OPEN = "holds", "does not hold", "not resolved at this scale"
#: "only marginally affect training efficiency": at most this slowdown of steps per second against
#: the baseline -- the paper's own largest for CSAN (2D-CSans: -0.06 of 1.28 steps/s, 4.7 %)
MARGINAL_SLOWDOWN = 0.05
#: a run's in-run steps/s are distorted when its slowest epoch is more than this many times slower than its
#: fastest: other work shared the machine (quiet bible runs of docs/results/lengths_*.json: 1.03 to 1.16;
#: beside other jobs: 1.3 to 150)
MAX_EPOCH_UPS_RATIO = 1.2
#: the confidence of the interval of the median round slowdown of a side-by-side benchmark
MEDIAN_CONFIDENCE = 0.95
CSAN = ("csan1d", "csan2d")
EXISTING = tuple(r.key for r in ROWS if r.key != BASELINE and r.key not in CSAN)
RULE = ("A over B holds when A is significantly better (p < 0.05, paired bootstrap and approximate "
        "randomisation) in every pair of a seed of A and a seed of B; does not hold when B is in every pair; "
        "otherwise it is not resolved at this scale.")

Runs = Sequence[Tuple[Optional[int], Sequence[str]]]  # (seed, translations) of each seed of a system


def combine(verdicts: Sequence[str]) -> str:
    """A claim of several comparisons: holds when all hold, does not hold when one does not."""
    if any(v == FAILS for v in verdicts):
        return FAILS
    return HOLDS if verdicts and all(v == HOLDS for v in verdicts) else OPEN


class Tester:
    """Every seed pair of two systems tested (:func:`.seeds.score_seeds`, BLEU), each system as the
    base once for all the systems it is compared with."""

    def __init__(self, systems: Dict[str, Runs], refs: Sequence[str], tokenize: str = "13a",
                 bs_samples: int = 1000, ar_trials: int = 10000):
        self.systems, self.refs, self.tokenize = systems, refs, tokenize
        self.bs_samples, self.ar_trials = bs_samples, ar_trials
        self.done: Dict[Tuple[str, str], Dict] = {}  # (base, other) -> other tested against base

    def run(self, pairs: Sequence[Tuple[str, str]]) -> None:
        """Test every (A, B) pair: A against B's seeds, then B against A's where A is not better in every
        pair (where it is, B is better in none: a pair is marked only in the direction of its delta)."""
        self._tests([(b, a) for a, b in pairs])
        self._tests([(a, b) for a, b in pairs if not self.done[(b, a)]["mark"]])

    def _tests(self, wanted: Sequence[Tuple[str, str]]) -> None:
        by_base: Dict[str, List[str]] = OrderedDict()
        for base, other in wanted:
            if (base, other) not in self.done and other not in by_base.setdefault(base, []):
                by_base[base].append(other)
        for base, others in by_base.items():
            if not others:
                continue
            scored = score_seeds(OrderedDict([(base, self.systems[base])] + [(o, self.systems[o]) for o in others]),
                                 self.refs, self.tokenize, self.bs_samples, self.ar_trials, metrics=("bleu",))
            for o in others:
                s = scored["systems"][o]
                self.done[(base, o)] = {"mark": s["mark"], "pairs_marked": s["pairs_marked"], "pairs": len(s["pairs"]),
                                        "delta": s["delta"], "mean": s["bleu_mean"],
                                        "base_mean": scored["systems"][base]["bleu_mean"]}

    def compare(self, a: str, b: str) -> Dict:
        """A over B: the verdict and the numbers that decide it."""
        self.run([(a, b)])
        fwd = self.done[(b, a)]
        rev = {"mark": "", "pairs_marked": 0} if fwd["mark"] else self.done[(a, b)]
        verdict = HOLDS if fwd["mark"] else FAILS if rev["mark"] else OPEN
        return {"better": a, "than": b, "verdict": verdict, "bleu": fwd["mean"], "than_bleu": fwd["base_mean"],
                "delta": fwd["delta"], "pairs": fwd["pairs"], "pairs_better": fwd["pairs_marked"],
                "pairs_worse": rev["pairs_marked"], "mark": fwd["mark"], "reverse_mark": rev["mark"]}


def _claim(cid: str, source: str, words: str, comparisons: List[Dict], rule: str, missing: Sequence[str] = (),
           parts: Sequence[Dict] = (), notes: Sequence[str] = ()) -> Dict:
    verdict = combine([c["verdict"] for c in comparisons] + [p["verdict"] for p in parts])
    notes = list(notes)
    if missing:
        notes.append(f"not in the study: {', '.join(missing)}")
        if verdict == HOLDS:
            verdict = OPEN
    return {"id": cid, "source": source, "claim": words, "verdict": verdict, "rule": rule,
            "comparisons": comparisons, "parts": list(parts), "notes": notes}


def _missing(keys: Sequence[str], have) -> List[str]:
    return [k for k in keys if k not in have]


def table1_claims(rows: Dict[str, Dict], refs: Sequence[str], tokenize: str = "13a", bs_samples: int = 1000,
                  ar_trials: int = 10000, speed: Optional[Dict] = None) -> List[Dict]:
    """Claims 1-4 from Table 1's rows: ``{key: {"runs": [(seed, translations)], "params": int,
    "ups": [steps/s of each seed], "ups_epochs": [each seed's steps/s per epoch] or None}}``, the
    baseline among them; ``speed``: the rows measured side by side (:func:`.side_by_side.read_bench`)."""
    if BASELINE not in rows:
        raise ValueError(f"Table 1's claims compare with the {BASELINE} row: the table has none")
    t = Tester({k: r["runs"] for k, r in rows.items()}, refs, tokenize, bs_samples, ar_trials)
    others = [r.key for r in ROWS[1:]]
    improve = [(k, BASELINE) for k in others if k in rows]
    csan = [c for c in CSAN if c in rows]
    outperform = [(c, x) for c in csan for x in EXISTING if x in rows]
    t.run(improve + outperform)
    claims = [
        _claim("improve", "Table 1", "all the models improve translation quality",
               [t.compare(a, b) for a, b in improve], "each row over the baseline. " + RULE, _missing(others, rows)),
        _claim("outperform", "Table 1", "our models outperform all the existing works",
               [t.compare(a, b) for a, b in outperform], "1D- and 2D-CSAN each over every re-implemented method. " + RULE,
               _missing(CSAN + EXISTING, rows)),
        _claim("csan_over_cnns", "Table 1", "CSans achieve better performance than Cnns",
               [t.compare(c, "cnns") for c in csan if "cnns" in rows], "1D- and 2D-CSAN each over Cnns. " + RULE,
               _missing(CSAN + ("cnns",), rows)),
    ]
    claims.append(_claim("parameter_free", "Table 1", "our methods are parameter-free and thus only marginally "
                         "affect training efficiency", [], efficiency_rule(speed), _missing(CSAN, rows),
                         parts=[efficiency(rows, c, speed) for c in csan], notes=efficiency_context(rows, speed)))
    return claims


def efficiency_rule(speed: Optional[Dict] = None) -> str:
    head = ("per CSAN row: its parameters (counted in its runs) equal the baseline's; and its steps per second "
            "against the baseline's ")
    paper = "the paper's largest CSAN slowdown, 2D-CSans -0.06 of 1.28 steps/s"
    if speed:
        return (head + f"in the interleaved rounds of {describe_bench(speed)}, measured side by side: the "
                f"{MEDIAN_CONFIDENCE:.0%} distribution-free interval of the median round slowdown (the sign test's) at "
                f"most {MARGINAL_SLOWDOWN:.0%} holds ({paper}), above it does not hold, an interval across it (or "
                f"fewer rounds than such an interval needs) is not resolved.")
    return (head + f"in every seed pair of the runs' own steps per second (train.log): at most {MARGINAL_SLOWDOWN:.0%} "
            f"slower in every pair holds ({paper}), slower than that in every pair does not hold, pairs on both "
            f"sides are not resolved (timing noise as large as the threshold).")


def slowdowns(ups: Sequence[float], base_ups: Sequence[float]) -> List[float]:
    """1 - (steps/s of a seed) / (steps/s of a baseline seed), every pair."""
    return [1.0 - u / b for u in ups for b in base_ups]


def slowdown_verdict(slow: Sequence[float]) -> str:
    """At most :data:`MARGINAL_SLOWDOWN` in every pair holds, above it in every pair does not hold."""
    if slow and all(s <= MARGINAL_SLOWDOWN for s in slow):
        return HOLDS
    return FAILS if slow and all(s > MARGINAL_SLOWDOWN for s in slow) else OPEN


def median_interval(values: Sequence[float], confidence: float = MEDIAN_CONFIDENCE) -> Optional[Tuple[float, float]]:
    """The distribution-free interval of the median of ``values``: the k-th smallest and k-th largest,
    for the largest k with P(Binomial(n, 1/2) <= k - 1) <= (1 - confidence) / 2 (it covers the median
    with at least ``confidence`` whatever the distribution). None when n is too small (n < 6 at 95 %)."""
    n, tail, k = len(values), 0.0, 0
    while k < n and tail + comb(n, k) / 2 ** n <= (1.0 - confidence) / 2:
        tail += comb(n, k) / 2 ** n
        k += 1
    if k == 0:
        return None
    ordered = sorted(values)
    return ordered[k - 1], ordered[n - k]


def interval_verdict(interval: Optional[Tuple[float, float]]) -> str:
    """The interval at most :data:`MARGINAL_SLOWDOWN` holds, above it does not hold; else not resolved."""
    if interval is None:
        return OPEN
    return HOLDS if interval[1] <= MARGINAL_SLOWDOWN else FAILS if interval[0] > MARGINAL_SLOWDOWN else OPEN


def distorted(rows: Dict[str, Dict], key: str) -> List[str]:
    """Why the in-run steps/s of row ``key`` cannot be trusted: each of its runs whose per-epoch steps/s
    disagree by more than :data:`MAX_EPOCH_UPS_RATIO`, or that the table records none."""
    epochs = rows[key].get("ups_epochs")
    if not epochs:
        return [f"{_name(key)}: the table records no per-epoch steps/s (made before they were recorded), so "
                f"other work beside its runs cannot be ruled out"]
    seeds = [seed for seed, _ in rows[key]["runs"]]
    out = []
    for i, ups in enumerate(epochs):
        seed = seeds[i] if i < len(seeds) else None
        if ups and (min(ups) <= 0 or max(ups) / min(ups) > MAX_EPOCH_UPS_RATIO):
            out.append(f"{_name(key)}{'' if seed is None else f' seed {seed}'}: its epochs ran {min(ups):.2f} to "
                       f"{max(ups):.2f} steps/s ({max(ups) / max(min(ups), 1e-9):.1f}x, more than {MAX_EPOCH_UPS_RATIO}x: "
                       f"other work shared the machine)")
    return out


def efficiency(rows: Dict[str, Dict], key: str, speed: Optional[Dict] = None) -> Dict:
    """Row ``key``'s parameters and speed against the baseline's: the speed from ``speed``'s rounds
    (side by side) when given, else from the runs' own steps/s unless they are :func:`distorted`."""
    base = rows[BASELINE]
    added = rows[key]["params"] - base["params"]
    slow = slowdowns(rows[key]["ups"], base["ups"])
    reasons: List[str] = []
    interval = None
    if speed:
        rounds = speed["rows"][key]["slowdowns"]
        interval = median_interval(rounds)
        speed_verdict = interval_verdict(interval)
        if interval is None:
            reasons.append(f"{speed['path']} has {len(rounds)} round(s): too few for a {MEDIAN_CONFIDENCE:.0%} "
                           f"interval of the median")
    else:
        rounds = None
        reasons = distorted(rows, BASELINE) + distorted(rows, key)
        speed_verdict = OPEN if reasons else slowdown_verdict(slow)
    verdict = FAILS if added != 0 else speed_verdict
    return {"row": key, "verdict": verdict, "params_added": added, "speed_verdict": speed_verdict,
            "speed_from": "side by side" if speed else "in-run", "round_slowdowns": rounds,
            "median_interval": list(interval) if interval else None, "speed_reasons": reasons,
            "slowdowns": slow, "ups": list(rows[key]["ups"]), "baseline_ups": list(base["ups"])}


def efficiency_context(rows: Dict[str, Dict], speed: Optional[Dict] = None) -> List[str]:
    """The other rows' parameters and median slowdown, beside the CSAN rows' (side by side where measured);
    without a side-by-side measurement, what can distort the runs' own."""
    base = rows[BASELINE]
    out = []
    for r in ROWS[1:]:
        if r.key in rows:
            measured = (speed or {}).get("rows", {}).get(r.key)
            s = measured["slowdowns"] if measured else slowdowns(rows[r.key]["ups"], base["ups"])
            out.append(f"{r.name}: {rows[r.key]['params'] - base['params']:+,} parameters, "
                       f"{median(s):+.1%} median slowdown ({'side by side' if measured else 'in-run'})")
    notes = ["beside it, every row: " + "; ".join(out)] if out else []
    if not speed:
        notes.append("the runs' own steps/s were measured on a shared machine, where other work distorts them; "
                     "fairseq-attn-bench measures the rows side by side (docs/howto/table1.md): give its JSON with "
                     "--speed")
    return notes


def figure2_claims(windows: Dict[int, Runs], heads: Dict[int, Runs], refs: Sequence[str], tokenize: str = "13a",
                   bs_samples: int = 1000, ar_trials: int = 10000, window_2d: int = 11) -> List[Dict]:
    """Claims 5-6 from Figure 2's points (``{value: [(seed, translations)]}`` of each sweep)."""
    systems = {f"window {v}": r for v, r in windows.items()}
    systems.update({f"{v} heads": r for v, r in heads.items()})
    t = Tester(systems, refs, tokenize, bs_samples, ar_trials)
    others = sorted(v for v in windows if v != 11)
    pairs = [("window 11", f"window {v}") for v in others] if 11 in windows else []
    areas = sorted(heads)
    above = [a for a in areas if a > 1]
    first = above[0] if above else None
    part_pairs = []
    if first is not None and 1 in heads:
        part_pairs.append((f"{first} heads", "1 heads"))
    if first is not None and areas[-1] > first:
        part_pairs.append((f"{first} heads", f"{areas[-1]} heads"))
    t.run(pairs + part_pairs)
    claims = [_claim("window_11", "Figure 2a", "the local size with 11 is superior to other settings",
                     [t.compare(a, b) for a, b in pairs], "window 11 over each other window. " + RULE,
                     ["window 11"] if 11 not in windows else [],
                     notes=[] if others else ["no other window in the study"])]
    parts, notes = [], []
    if first is not None and 1 in heads:
        parts.append(dict(t.compare(f"{first} heads", "1 heads"), part="across heads improves"))
    else:
        notes.append("(a) needs area 1 and an area above 1")
        parts.append({"part": "across heads improves", "verdict": OPEN})
    if first is not None and areas[-1] > first:
        parts.append(dict(t.compare(f"{first} heads", f"{areas[-1]} heads"), part="more heads drop"))
    else:
        notes.append("(b) needs two areas above 1 (odd areas up to the encoder's heads)")
        parts.append({"part": "more heads drop", "verdict": OPEN})
    claims.append(_claim("heads", "Figure 2b", "by considering the features across heads (> 1), 2D-CSans further "
                         "improve the translation quality; when the number of heads goes up, the quality drops",
                         [], f"at window {window_2d}: (a) the smallest area above 1 over area 1, (b) that area over "
                         "the largest area; both must hold. " + RULE, parts=parts, notes=notes))
    return claims


# ---------------------------------------------------------------- the report
def _cmp_line(c: Dict) -> str:
    return (f"| {c.get('part', '')} | {_name(c['better'])} | {_name(c['than'])} | {c['bleu']:.2f} | {c['than_bleu']:.2f} | "
            f"{c['delta']:+.2f} | {c['pairs_better']}/{c['pairs']} | {c['pairs_worse']}/{c['pairs']} | {c['verdict']} |")


def _name(key: str) -> str:
    return ROW_BY_KEY[key].name if key in ROW_BY_KEY else key


def _span(slow: Sequence[float]) -> str:
    return f"{min(slow):+.1%} to {max(slow):+.1%}" if slow else "none"


def _efficiency_line(p: Dict) -> str:
    """A CSAN row's parameters and speed: side by side per round (when measured), and the runs' own."""
    own = (f"steps/s {', '.join(f'{u:.3f}' for u in p['ups'])} against the baseline's "
           f"{', '.join(f'{u:.3f}' for u in p['baseline_ups'])}: slowdown {_span(p['slowdowns'])} over "
           f"{len(p['slowdowns'])} seed pairs")
    if p.get("speed_from") == "side by side":
        r = p["round_slowdowns"]
        iv = p.get("median_interval")
        middle = (f"median {median(r):+.1%} ({MEDIAN_CONFIDENCE:.0%} interval {_span(iv)}), " if iv else
                  f"median {median(r):+.1%}, " if r else "")
        speed = (f"side by side, slowdown {middle}{_span(r)} over {len(r)} rounds; in-run, shared machine: "
                 f"{own}")
    else:
        speed = own
    why = "".join(f"; not resolved: {w}" for w in p.get("speed_reasons", []))
    return (f"- {_name(p['row'])}: {p['params_added']:+,} parameters; {speed} (speed: {p['speed_verdict']}{why}): "
            f"**{p['verdict']}**")


def markdown(report: Dict) -> str:
    out = ["# The CSAN paper's claims, tested", "",
           "Each claim of Yang et al. (2019), sections 5.1-5.2, with its verdict: holds, does not hold, or not resolved "
           "at this scale. " + RULE + " A claim holds when each of its comparisons holds, does not hold when one does "
           "not, and is not resolved otherwise (or when a row or point it names is not in the study). "
           f"Tests: BLEU, {report['bs_samples']} bootstrap resamples, {report['ar_trials']} randomisation trials.", ""]
    for i, c in enumerate(report["claims"], 1):
        out += [f"## {i}. \"{c['claim']}\" ({c['source']}): **{c['verdict']}**", "", f"Rule: {c['rule']}", ""]
        cmps = [p for p in c["parts"] if "better" in p] + c["comparisons"]
        if cmps:
            out += ["| part | A | over B | BLEU A | BLEU B | Δ | pairs A sig. better | pairs B sig. better | verdict |",
                    "|---|---|---|---:|---:|---:|---:|---:|---|"] + [_cmp_line(x) for x in cmps] + [""]
        for p in c["parts"]:
            if "row" in p:
                out.append(_efficiency_line(p))
            elif "better" not in p:
                out.append(f"- {p['part']}: {p['verdict']}")
        out += [f"- {n}" for n in c["notes"]] + [""]
    return "\n".join(out)
