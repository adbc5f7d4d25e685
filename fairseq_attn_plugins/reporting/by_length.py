"""Scores by source sentence length (``--by-length`` of ``fairseq-attn-significance`` and
``fairseq-attn-results``): the test set split into buckets by the length of each source
sentence, every metric of the main table scored and tested on each bucket.

* **Length** of a sentence: the number of whitespace-separated words of its line in the
  detokenised source (``--src``), ``len(line.split())``; an empty line has length 0.
* **Buckets** for edges ``e1 < ... < ek`` (``--by-length 10,20,30``): ``1–e1`` (length <= e1,
  length 0 included), ``e1+1–e2``, ..., ``> ek``: k + 1 buckets.
* ``--by-length auto`` (:func:`auto_edges`): about :data:`AUTO_BUCKETS` buckets of roughly equal
  size. With the lengths sorted ascending, ``L[0..n-1]``, edge i (i = 1..4) is the nearest-rank
  quantile ``L[ceil(i * n / 5) - 1]``, the longest length among the shortest i/5 of the
  sentences; equal edges are merged, edges of 0 and edges >= the longest length (which would
  leave the last bucket empty) are dropped; with no edge left the one edge is the longest
  length (at least 1). Ties at an edge all go to the lower bucket, so buckets are equal only
  up to ties. With ``--train-max-len N`` the training length N is an edge too (dropped by the
  same rule), so that no bucket holds lengths on both sides of it.
* **Statistics per bucket**: the sentences of the bucket (source, reference, every system's
  line) go through :func:`.significance.paired_tests`, i.e. sacreBLEU's own ``PairedTest``
  with the seed, ``--bs-samples`` and ``--ar-trials`` of the main table (segment metrics such
  as COMET: their segment scores of the main table, subset, with the same draws). Marks are
  :func:`fairseq_attn_records.metrics.metric_mark`'s, as in the main table (better than the
  baseline only). A bucket of fewer than :data:`MIN_SENTENCES_FOR_TEST` sentences is scored
  but not tested: no mark, no p-values. A bucket of 0 sentences has no scores.
* **Intervals** (the plot and ``--json``): the 95% bootstrap interval ``bs_mean ± bs_ci`` that
  sacreBLEU's paired bootstrap returns for each system on the bucket; for the baseline too
  (``PairedTest`` resamples the baseline alone with its own seeded draw, ``_bootstrap_resample``,
  when the test is the bootstrap), so no interval is computed here.
* ``--train-max-len N`` (a note given by the caller): a bucket whose shortest possible length
  is > N is "beyond" the training length; one holding lengths on both sides of N is "partly
  beyond"; a column of the table, shaded in the plot. N is compared with source words as
  counted above: give it in the same unit.
"""

import bisect
import math
import os
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from fairseq_attn_records import metrics as M

from .significance import paired_tests

MIN_SENTENCES_FOR_TEST = 30
AUTO_BUCKETS = 5
LENGTH_DEFINITION = ("number of whitespace-separated words of the source line (--src); an empty line has "
                     "length 0 and falls in the first bucket")
AUTO_RULE = (f"auto: nearest-rank quantiles of the source lengths at 1/{AUTO_BUCKETS} .. "
             f"{AUTO_BUCKETS - 1}/{AUTO_BUCKETS} (edge i = sorted lengths[ceil(i*n/{AUTO_BUCKETS}) - 1]), "
             "and the training length (--train-max-len) when given, deduplicated, edges of 0 or >= the "
             "longest length dropped")
EDGES_HELP = "'auto' or comma-separated increasing positive integers, e.g. 10,20,30,50"
BEYOND = "beyond"
PARTLY_BEYOND = "partly beyond"
WITHIN = "within"


@dataclass(frozen=True)
class Bucket:
    """Lengths ``lo..hi`` (``hi`` None: no upper end); the first bucket also holds length 0."""

    lo: int
    hi: Optional[int]

    @property
    def label(self) -> str:
        if self.hi is None:
            return f"> {self.lo - 1}"
        return str(self.hi) if self.hi == self.lo else f"{self.lo}–{self.hi}"


# -- flags ---------------------------------------------------------------------------------

def parse_edges(spec: str):
    """``"auto"`` -> "auto"; ``"10,20,30"`` -> [10, 20, 30]; anything else: ValueError naming --by-length."""
    spec = (spec or "").strip()
    if spec == "auto":
        return "auto"
    parts = [s.strip() for s in spec.split(",")]
    if not spec or any(not (s.isascii() and s.isdigit()) for s in parts):
        raise ValueError(f"--by-length {spec!r}: {EDGES_HELP}")
    edges = [int(s) for s in parts]
    if edges[0] <= 0 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"--by-length {spec}: edges must be positive and strictly increasing ({EDGES_HELP})")
    return edges


def parse_train_max_len(spec: Optional[str]) -> Optional[int]:
    """``--train-max-len``: None or a positive integer; else ValueError naming the flag."""
    if spec is None:
        return None
    if not (spec.strip().isascii() and spec.strip().isdigit()) or int(spec) < 1:
        raise ValueError(f"--train-max-len {spec}: a positive integer (the longest training sentence, in words)")
    return int(spec)


def check_flags(by_length: Optional[str], src: Optional[str], plot: Optional[str],
                train_max_len: Optional[str]) -> Tuple[Optional[object], Optional[int]]:
    """The by-length flags of a command checked together, before any work: (edges or "auto"
    or None, train_max_len or None)."""
    if plot is not None and by_length is None:
        raise ValueError("--plot needs --by-length (it draws the scores by source length)")
    if train_max_len is not None and by_length is None:
        raise ValueError("--train-max-len needs --by-length (it annotates the length buckets)")
    if by_length is None:
        return None, None
    edges = parse_edges(by_length)
    if not src:
        raise ValueError("--by-length needs --src (lengths are counted in words of the source sentences)")
    return edges, parse_train_max_len(train_max_len)


# -- buckets -------------------------------------------------------------------------------

def sentence_length(line: str) -> int:
    return len(line.split())


def auto_edges(lengths: Sequence[int], n_buckets: int = AUTO_BUCKETS,
               train_max_len: Optional[int] = None) -> List[int]:
    """Quantile edges giving about ``n_buckets`` buckets of similar size (rule in the module doc);
    with ``train_max_len`` that length is an edge too, so that no bucket straddles it."""
    s = sorted(lengths)
    n, longest = len(s), (max(lengths) if lengths else 0)
    edges = {s[math.ceil(i * n / n_buckets) - 1] for i in range(1, n_buckets)} if n else set()
    if train_max_len is not None:
        edges.add(train_max_len)
    edges = [e for e in sorted(edges) if 0 < e < longest]
    return edges or [max(longest, 1)]


def make_buckets(edges: Sequence[int]) -> List[Bucket]:
    bounds = [0] + list(edges)
    return [Bucket(lo + 1, hi) for lo, hi in zip(bounds, bounds[1:])] + [Bucket(edges[-1] + 1, None)]


def assign_buckets(lengths: Sequence[int], edges: Sequence[int]) -> List[int]:
    """Bucket index of each length: the first i with length <= edges[i], else len(edges)."""
    return [bisect.bisect_left(edges, n) for n in lengths]


def training_relation(bucket: Bucket, train_max_len: Optional[int]) -> Optional[str]:
    """Where a bucket lies with respect to the training length N: beyond (shortest possible
    length > N), partly beyond (N inside it), within, or None when N is not given."""
    if train_max_len is None:
        return None
    if bucket.lo > train_max_len:
        return BEYOND
    if bucket.hi is None or bucket.hi > train_max_len:
        return PARTLY_BEYOND
    return WITHIN


def subset(lines: Sequence, indices: Sequence[int]) -> list:
    return [lines[i] for i in indices]


# -- scores --------------------------------------------------------------------------------

class SubsetSegments:
    """A segment scorer (as :func:`.significance.paired_tests` takes one) that hands back the
    segment scores already computed for the whole test set, restricted to one bucket; its
    signature is the original scorer's."""

    def __init__(self, segments: Sequence[Sequence[float]], indices: Sequence[int], signer=None):
        self.segments = [subset(seg, indices) for seg in segments]
        self.signer = signer

    def score_systems(self, sources, refs, systems):
        return self.segments

    def signature(self, **kw) -> str:
        return self.signer.signature(**kw) if self.signer is not None else "segment scores of the main table"


def bucket_rows(result: Dict, tested: bool) -> List[Dict]:
    """Per system of one bucket's :func:`paired_tests` result: scores, deltas and marks
    (no mark and no p-values when the bucket is not tested)."""
    keys = result["metrics"]
    base = result["systems"][0]["scores"]
    rows = []
    for i, s in enumerate(result["systems"]):
        scores = {}
        for k in keys:
            cell = {f: s["scores"][k].get(f) for f in ("score", "bs_mean", "bs_ci")}
            if i:
                cell.update(p_bootstrap=s["scores"][k].get("p_bootstrap") if tested else None,
                            p_ar=s["scores"][k].get("p_ar") if tested else None)
            scores[k] = cell
        rows.append({"name": s["name"], "scores": scores,
                     "deltas": {k: None if not i else s["scores"][k]["score"] - base[k]["score"] for k in keys},
                     "marks": {k: M.metric_mark(k, s["scores"][k], base[k]["score"]) if i and tested else ""
                               for k in keys}})
    return rows


def scores_by_length(refs: Sequence[str], systems: Sequence[Tuple[str, Sequence[str]]], sources: Sequence[str],
                     edges, tokenize: str = "13a", bs_samples: int = 1000, ar_trials: int = 10000,
                     metrics: Sequence[str] = M.DEFAULT_METRICS,
                     segments: Optional[Mapping[str, Sequence[Sequence[float]]]] = None,
                     signers: Optional[Mapping] = None, train_max_len: Optional[int] = None) -> Dict:
    """Every bucket's scores, deltas, marks, p-values and intervals (``systems[0]``: the baseline).

    ``edges``: a list or "auto"; ``segments``: ``{metric key: [segment scores of each system]}``
    of the segment metrics (COMET) of the main table; ``signers``: ``{key: scorer}`` whose
    signatures they carry. Returns the ``by_length`` object of ``--json``."""
    if len(sources) != len(refs):
        raise ValueError(f"the source has {len(sources)} lines but the reference has {len(refs)}")
    lengths = [sentence_length(s) for s in sources]
    spec = "auto" if edges == "auto" else ",".join(map(str, edges))
    edges = auto_edges(lengths, train_max_len=train_max_len) if edges == "auto" else list(edges)
    where = assign_buckets(lengths, edges)
    out_buckets, keys, labels = [], None, None
    for b, bucket in enumerate(make_buckets(edges)):
        idx = [i for i, w in enumerate(where) if w == b]
        entry = {"lo": bucket.lo, "hi": bucket.hi, "label": bucket.label, "n": len(idx),
                 "training": training_relation(bucket, train_max_len),
                 "tested": len(idx) >= MIN_SENTENCES_FOR_TEST, "systems": []}
        if idx:
            scorers = {k: SubsetSegments(seg, idx, (signers or {}).get(k)) for k, seg in (segments or {}).items()}
            res = paired_tests(subset(refs, idx), [(name, subset(h, idx)) for name, h in systems], tokenize,
                               bs_samples, ar_trials, metrics=metrics, sources=subset(sources, idx),
                               scorers=scorers)
            keys, labels = res["metrics"], res["labels"]
            entry["systems"] = bucket_rows(res, entry["tested"])
        out_buckets.append(entry)
    return {"length": LENGTH_DEFINITION, "edges_spec": spec, "auto_rule": AUTO_RULE if spec == "auto" else None,
            "edges": edges, "min_sentences_for_test": MIN_SENTENCES_FOR_TEST, "train_max_len": train_max_len,
            "metrics": keys, "labels": labels, "baseline": systems[0][0], "system_names": [n for n, _ in systems],
            "bs_samples": bs_samples, "ar_trials": ar_trials, "tokenize": tokenize, "buckets": out_buckets}


# -- table and plot ------------------------------------------------------------------------

def format_markdown(data: Dict) -> str:
    """The table "Scores by source length (words)": bucket, n, then per metric each system's
    score with its mark and each compared system's Δ; a training column with --train-max-len."""
    keys, labels, names = data["metrics"] or [], data["labels"] or {}, data["system_names"]
    train = data.get("train_max_len") is not None
    head = "| Source length | n |" + (f" vs. training (≤ {data['train_max_len']}) |" if train else "")
    rule = "|---|---:|" + ("---|" if train else "")
    for k in keys:
        head += "".join(f" {labels[k]} {n} |" for n in names) + "".join(f" Δ {labels[k]} {n} |" for n in names[1:])
        rule += "---:|" * (2 * len(names) - 1)
    lines = ["### Scores by source length (words)", "", head, rule]
    for b in data["buckets"]:
        row = f"| {b['label']} | {b['n']} |" + (f" {b['training']} |" if train else "")
        for k in keys:
            nd = M.digits(k)
            if not b["systems"]:
                row += " - |" * (2 * len(names) - 1)
                continue
            row += "".join(f" {s['scores'][k]['score']:.{nd}f}{s['marks'][k]} |" for s in b["systems"])
            row += "".join(f" {s['deltas'][k]:+.{nd}f} |" for s in b["systems"][1:])
        lines.append(row)
    return "\n".join(lines)


def legend_lines(data: Dict) -> List[str]:
    out = [f"Length: {data['length']}. Buckets: " +
           (f"{data['auto_rule']}: edges {','.join(map(str, data['edges']))}." if data.get("auto_rule")
            else f"edges {data['edges_spec']}."),
           f"Per bucket: that bucket's sentences scored and tested as the main table (sacreBLEU's PairedTest, "
           f"{data['bs_samples']} resamples / {data['ar_trials']} trials, same seed); marks as in the main table.",
           f"n < {data['min_sentences_for_test']}: no significance mark (too few sentences to test); "
           f"n = 0: no scores."]
    if data.get("train_max_len") is not None:
        out.append(f"vs. training: '{BEYOND}' = every sentence of the bucket is longer than the training length "
                   f"{data['train_max_len']} (words); '{PARTLY_BEYOND}' = the bucket holds lengths on both sides of it.")
    return out


def plot(data: Dict, png_path: str) -> None:
    """One panel per metric: x = bucket, y = score, one line per system with its 95% bootstrap
    interval (bs_mean ± bs_ci) as error bars; buckets beyond / partly beyond the training
    length shaded. Written whole (tmp file, then rename)."""
    from .figures import _pyplot

    plt = _pyplot()
    keys, buckets = data["metrics"] or ["bleu"], data["buckets"]
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 4.4), squeeze=False)
    xs = list(range(len(buckets)))
    for ax, k in zip(axes[0], keys):
        shaded = set()
        for b_i, b in enumerate(buckets):
            shade = {BEYOND: 0.25, PARTLY_BEYOND: 0.1}.get(b.get("training"))
            if shade:  # one legend entry per kind of shading
                ax.axvspan(b_i - 0.5, b_i + 0.5, color="grey", alpha=shade, linewidth=0,
                           label=None if b["training"] in shaded else f"{b['training']} training length")
                shaded.add(b["training"])
        for s_i, name in enumerate(data["system_names"]):
            cells = [b["systems"][s_i]["scores"][k] if b["systems"] else None for b in buckets]
            y = [math.nan if c is None else c["score"] for c in cells]
            lo = [0.0 if c is None or c["bs_mean"] is None else max(0.0, c["score"] - c["bs_mean"] + c["bs_ci"])
                  for c in cells]
            hi = [0.0 if c is None or c["bs_mean"] is None else max(0.0, c["bs_mean"] + c["bs_ci"] - c["score"])
                  for c in cells]
            ax.errorbar([x + 0.06 * (s_i - 0.5 * (len(data["system_names"]) - 1)) for x in xs], y, yerr=[lo, hi],
                        marker="o", markersize=4, capsize=3, color=f"C{s_i % 10}", label=name)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{b['label']}\nn={b['n']}" for b in buckets], fontsize=8)
        ax.set_xlim(-0.5, len(buckets) - 0.5)
        ax.set_xlabel("source length (words)")
        ax.set_ylabel(M.label(k))
        ax.set_title(f"{M.label(k)} by source length")
        ax.grid(alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()  # one legend below the panels, off the data
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 4), fontsize=8)
    fig.suptitle("error bars: 95% bootstrap interval (sacreBLEU's paired bootstrap on each bucket)", fontsize=9)
    fig.tight_layout(rect=(0, 0.08 + 0.04 * ((len(names) - 1) // 4), 1, 1))
    tmp = png_path + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, png_path)
