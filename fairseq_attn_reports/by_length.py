"""Scores by sentence length (``--by-length`` of ``fairseq-attn-significance`` and
``fairseq-attn-results``): the test set split into buckets by the length of each source
sentence (or reference, or output: ``--by-length-of``), every metric of the main table scored
and tested on each bucket.

* **Length** of a sentence: the number of whitespace-separated words of its line,
  ``len(line.split())``; an empty line has length 0. ``--by-length-of src`` (default): of the
  detokenised source (``--src``); ``ref``: of the reference, so every system is still bucketed on
  the same sentences and tested as below; ``hyp``: of each system's own output (Varis & Bojar
  2021: the quality drop follows the output length). With ``hyp`` the systems' buckets hold
  different sentences, so there is no paired test: each system gets its scores and its own 95%
  bootstrap interval (sacreBLEU's ``_bootstrap_resample`` with its seed; a segment metric: the
  same draw of its segment scores) per bucket, no mark, no delta, and a ``n`` per system; the
  edges (``auto``) are computed from the reference lengths, one scale for all systems.
* **Length ratio**: per system and bucket, sacreBLEU's ``sys_len / ref_len`` on the bucket's
  sentences (:func:`fairseq_attn_records.metrics.length_ratio`).
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
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from fairseq_attn_records import metrics as M
from fairseq_attn_records.output_files import staged

from .significance import paired_tests

MIN_SENTENCES_FOR_TEST = 30
AUTO_BUCKETS = 5
LENGTH_OF = {"src": "source", "ref": "reference", "hyp": "output"}
LENGTH_DEFINITION = ("number of whitespace-separated words of the source line (--src); an empty line has "
                     "length 0 and falls in the first bucket")
LENGTH_DEFINITIONS = {
    "src": LENGTH_DEFINITION,
    "ref": "number of whitespace-separated words of the reference line; an empty line has length 0 and falls in "
           "the first bucket",
    "hyp": "number of whitespace-separated words of each system's own output line (edges of 'auto' from the "
           "reference lengths); an empty line has length 0 and falls in the first bucket"}
NO_PAIRED_TEST = ("by output length each system's buckets hold different sentences (its own outputs of that "
                  "length), so no paired test compares them: scores and each system's own 95% bootstrap "
                  "interval only, no marks, no deltas")
AUTO_RULE = (f"auto: nearest-rank quantiles of the source lengths at 1/{AUTO_BUCKETS} .. "
             f"{AUTO_BUCKETS - 1}/{AUTO_BUCKETS} (edge i = sorted lengths[ceil(i*n/{AUTO_BUCKETS}) - 1]), "
             "and the training length (--train-max-len) when given, deduplicated, edges of 0 or >= the "
             "longest length dropped")
AUTO_RULE_REF = AUTO_RULE.replace("of the source lengths", "of the reference lengths")
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


def parse_length_of(spec: Optional[str]) -> str:
    """``--by-length-of``: src (default), ref or hyp; else ValueError naming the flag."""
    if spec is None:
        return "src"
    if spec not in LENGTH_OF:
        raise ValueError(f"--by-length-of {spec}: give src (source length), ref (reference length) or hyp "
                         f"(each system's output length)")
    return spec


def check_flags(by_length: Optional[str], src: Optional[str], plot: Optional[str],
                train_max_len: Optional[str], length_of: Optional[str] = None,
                ar_trials: Optional[int] = None) -> Tuple[Optional[object], Optional[int]]:
    """The by-length flags of a command checked together, before any work: (edges or "auto"
    or None, train_max_len or None). ``ar_trials``: the paired-test flag as given (None: not given)."""
    of = parse_length_of(length_of)
    if length_of is not None and by_length is None:
        raise ValueError("--by-length-of needs --by-length (it says which length the buckets are of)")
    if of == "hyp" and ar_trials is not None:
        raise ValueError("--ar-trials with --by-length-of hyp: " + NO_PAIRED_TEST +
                         "; leave --ar-trials out (the main table then uses its default) or bucket by src or ref")
    if plot is not None and by_length is None:
        raise ValueError("--plot needs --by-length (it draws the scores by source length)")
    if train_max_len is not None and by_length is None:
        raise ValueError("--train-max-len needs --by-length (it annotates the length buckets)")
    if by_length is None:
        return None, None
    edges = parse_edges(by_length)
    if not src and of == "src":
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
        rows.append({"name": s["name"], "scores": scores, "length_ratio": s.get("length_ratio"),
                     "deltas": {k: None if not i else s["scores"][k]["score"] - base[k]["score"] for k in keys},
                     "marks": {k: M.metric_mark(k, s["scores"][k], base[k]["score"]) if i and tested else ""
                               for k in keys}})
    return rows


def scores_by_length(refs: Sequence[str], systems: Sequence[Tuple[str, Sequence[str]]], sources: Sequence[str],
                     edges, tokenize: str = "13a", bs_samples: int = 1000, ar_trials: int = 10000,
                     metrics: Sequence[str] = M.DEFAULT_METRICS,
                     segments: Optional[Mapping[str, Sequence[Sequence[float]]]] = None,
                     signers: Optional[Mapping] = None, train_max_len: Optional[int] = None,
                     length_of: str = "src") -> Dict:
    """Every bucket's scores, deltas, marks, p-values and intervals (``systems[0]``: the baseline).

    ``edges``: a list or "auto"; ``segments``: ``{metric key: [segment scores of each system]}``
    of the segment metrics (COMET) of the main table; ``signers``: ``{key: scorer}`` whose
    signatures they carry; ``length_of``: src, ref or hyp (:func:`scores_by_output_length`).
    Returns the ``by_length`` object of ``--json``."""
    if length_of == "hyp":
        return scores_by_output_length(refs, systems, edges, tokenize, bs_samples, metrics, segments,
                                       train_max_len)
    if sources is not None and len(sources) != len(refs):
        raise ValueError(f"the source has {len(sources)} lines but the reference has {len(refs)}")
    lengths = [sentence_length(s) for s in (sources if length_of == "src" else refs)]
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
                               bs_samples, ar_trials, metrics=metrics,
                               sources=None if sources is None else subset(sources, idx),
                               scorers=scorers)
            keys, labels = res["metrics"], res["labels"]
            entry["systems"] = bucket_rows(res, entry["tested"])
        out_buckets.append(entry)
    return {"length_of": length_of, "length": LENGTH_DEFINITIONS[length_of], "paired": True,
            "edges_spec": spec, "auto_rule": (AUTO_RULE if length_of == "src" else AUTO_RULE_REF) if spec == "auto" else None,
            "edges": edges, "min_sentences_for_test": MIN_SENTENCES_FOR_TEST, "train_max_len": train_max_len,
            "metrics": keys, "labels": labels, "baseline": systems[0][0], "system_names": [n for n, _ in systems],
            "bs_samples": bs_samples, "ar_trials": ar_trials, "tokenize": tokenize, "buckets": out_buckets}


def bootstrap_cell(key: str, refs: Sequence[str], hyps: Sequence[str], tokenize: str, bs_samples: int,
                   segments: Optional[Sequence[float]] = None) -> Dict:
    """One system's score on some sentences with sacreBLEU's 95% bootstrap interval of a single
    system (the draw of its ``_bootstrap_resample``, ``SACREBLEU_SEED``, and its ``estimate_ci``, each resample
    summed in float64: :func:`fairseq_attn_records.metrics.resampled_scores`); a segment metric
    (``segments``): the mean, resampled with the same draw."""
    if segments is not None:
        stats = M._mean_stats(segments)
        mean, ci = M.estimate_ci(M._resampled_means(stats, M.bootstrap_indices(len(stats), bs_samples,
                                                                                  comparison=False)))
        return {"score": M._mean_of(stats), "bs_mean": mean, "bs_ci": ci}
    metric = M.make_metric(key, tokenize)
    stats = metric._extract_corpus_statistics(list(hyps), [list(refs)])
    mean, ci = M.estimate_ci(M.resampled_scores(M.score_of(metric), stats,
                                                M.bootstrap_indices(len(stats), bs_samples, comparison=False)))
    score = M.make_metric(key, tokenize).corpus_score(list(hyps), [list(refs)]).score
    return {"score": float(score), "bs_mean": mean, "bs_ci": ci}


def scores_by_output_length(refs: Sequence[str], systems: Sequence[Tuple[str, Sequence[str]]], edges,
                            tokenize: str = "13a", bs_samples: int = 1000,
                            metrics: Sequence[str] = M.DEFAULT_METRICS,
                            segments: Optional[Mapping[str, Sequence[Sequence[float]]]] = None,
                            train_max_len: Optional[int] = None) -> Dict:
    """``--by-length-of hyp``: each system bucketed by the length of its own outputs; per bucket and
    system its n, scores with bootstrap intervals and length ratio, no paired test (module doc)."""
    for name, hyps in systems:
        if len(hyps) != len(refs):
            raise ValueError(f"{name}: {len(hyps)} lines but the reference has {len(refs)}")
    spec = "auto" if edges == "auto" else ",".join(map(str, edges))
    edges = auto_edges([sentence_length(r) for r in refs], train_max_len=train_max_len) if edges == "auto" \
        else list(edges)
    keys = ["bleu"] + [k for k in metrics if k != "bleu"] + [k for k in (segments or {}) if k not in metrics]
    buckets = [{"lo": b.lo, "hi": b.hi, "label": b.label, "n": None, "training": training_relation(b, train_max_len),
                "tested": False, "systems": []} for b in make_buckets(edges)]
    for s_i, (name, hyps) in enumerate(systems):
        where = assign_buckets([sentence_length(h) for h in hyps], edges)
        for b_i, entry in enumerate(buckets):
            idx = [i for i, w in enumerate(where) if w == b_i]
            cell = {"name": name, "n": len(idx), "scores": {}, "deltas": {k: None for k in keys},
                    "marks": {k: "" for k in keys}, "length_ratio": None}
            if idx:
                r, h = subset(refs, idx), subset(hyps, idx)
                for k in keys:
                    seg = (segments or {}).get(k)
                    cell["scores"][k] = bootstrap_cell(k, r, h, tokenize, bs_samples,
                                                       None if seg is None else subset(seg[s_i], idx))
                cell["length_ratio"] = M.length_ratio(r, h, tokenize)["ratio"]
            else:
                cell["scores"] = {k: None for k in keys}
            entry["systems"].append(cell)
    return {"length_of": "hyp", "length": LENGTH_DEFINITIONS["hyp"], "paired": False, "no_paired_test": NO_PAIRED_TEST,
            "edges_spec": spec, "auto_rule": AUTO_RULE_REF if spec == "auto" else None,
            "edges": edges, "min_sentences_for_test": MIN_SENTENCES_FOR_TEST, "train_max_len": train_max_len,
            "metrics": keys, "labels": {k: M.label(k) for k in keys}, "baseline": systems[0][0],
            "system_names": [n for n, _ in systems], "bs_samples": bs_samples, "ar_trials": None,
            "tokenize": tokenize, "buckets": buckets}


# -- table and plot ------------------------------------------------------------------------

def _ratio(r) -> str:
    return "-" if r is None else f"{r:.3f}"


def format_markdown(data: Dict) -> str:
    """The table "Scores by source (reference, output) length (words)": bucket, n, then per metric
    each system's score with its mark and each compared system's Δ, then each system's length
    ratio; a training column with --train-max-len. By output length: n per system, no Δ."""
    keys, labels, names = data["metrics"] or [], data["labels"] or {}, data["system_names"]
    of = LENGTH_OF[data.get("length_of", "src")]
    paired = data.get("paired", True)
    train = data.get("train_max_len") is not None
    head = f"| {of.capitalize()} length |" + (" n |" if paired else "".join(f" n {n} |" for n in names))
    head += f" vs. training (≤ {data['train_max_len']}) |" if train else ""
    rule = "|---|" + ("---:|" if paired else "---:|" * len(names)) + ("---|" if train else "")
    for k in keys:
        head += "".join(f" {labels[k]} {n} |" for n in names)
        rule += "---:|" * len(names)
        if paired:
            head += "".join(f" Δ {labels[k]} {n} |" for n in names[1:])
            rule += "---:|" * (len(names) - 1)
    head += "".join(f" Len. ratio {n} |" for n in names)
    rule += "---:|" * len(names)
    lines = [f"### Scores by {of} length (words)", "", head, rule]
    for b in data["buckets"]:
        ns = f" {b['n']} |" if paired else "".join(f" {s['n']} |" for s in b["systems"])
        row = f"| {b['label']} |" + ns + (f" {b['training']} |" if train else "")
        for k in keys:
            nd = M.digits(k)
            if not b["systems"]:
                row += " - |" * ((2 if paired else 1) * len(names) - (1 if paired else 0))
                continue
            row += "".join(" - |" if s["scores"][k] is None else f" {s['scores'][k]['score']:.{nd}f}{s['marks'][k]} |"
                           for s in b["systems"])
            if paired:
                row += "".join(f" {s['deltas'][k]:+.{nd}f} |" for s in b["systems"][1:])
        row += "".join(f" {_ratio(s.get('length_ratio'))} |" for s in b["systems"]) if b["systems"] \
            else " - |" * len(names)
        lines.append(row)
    return "\n".join(lines)


def legend_lines(data: Dict) -> List[str]:
    out = [f"Length: {data['length']}. Buckets: " +
           (f"{data['auto_rule']}: edges {','.join(map(str, data['edges']))}." if data.get("auto_rule")
            else f"edges {data['edges_spec']}."),
           (f"Per bucket: that bucket's sentences scored and tested as the main table (sacreBLEU's PairedTest, "
            f"{data['bs_samples']} resamples / {data['ar_trials']} trials, same seed); marks as in the main table."
            if data.get("paired", True) else
            f"No paired test: {data['no_paired_test']} ({data['bs_samples']} resamples, sacreBLEU's seed)."),
           (f"n < {data['min_sentences_for_test']}: no significance mark (too few sentences to test); "
            f"n = 0: no scores." if data.get("paired", True) else "n = 0: no scores."),
           "Len. ratio: output / reference length in tokens on the bucket's sentences (sacreBLEU's "
           "sys_len / ref_len, its BLEU tokeniser); below 1 the outputs are shorter than the references."]
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
        ax.set_xticklabels([b["label"] if b["n"] is None else f"{b['label']}\nn={b['n']}" for b in buckets],
                           fontsize=8)
        ax.set_xlim(-0.5, len(buckets) - 0.5)
        ax.set_xlabel(f"{LENGTH_OF[data.get('length_of', 'src')]} length (words)")
        ax.set_ylabel(M.label(k))
        ax.set_title(f"{M.label(k)} by {LENGTH_OF[data.get('length_of', 'src')]} length")
        ax.grid(alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()  # one legend below the panels, off the data
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 4), fontsize=8)
    fig.suptitle("error bars: 95% bootstrap interval (" + ("sacreBLEU's paired bootstrap on each bucket)"
                 if data.get("paired", True) else "each system's own bootstrap on its outputs of the bucket)"),
                 fontsize=9)
    fig.tight_layout(rect=(0, 0.08 + 0.04 * ((len(names) - 1) // 4), 1, 1))
    with staged(png_path, ".png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
