"""The scores-by-source-length flags shared by ``fairseq-attn-significance`` and
``fairseq-attn-results`` (:mod:`fairseq_attn_reports.by_length`)."""

import argparse
from typing import Dict, Optional, Sequence, Tuple

from .. import by_length


def add_length_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--by-length", metavar="EDGES",
                   help=f"also score every metric on buckets of source length (words of --src): {by_length.EDGES_HELP}; "
                   f"edges e1<...<ek give buckets 1-e1, e1+1-e2, ..., > ek (auto: about {by_length.AUTO_BUCKETS} "
                   f"buckets of similar size); paired tests per bucket, no mark below "
                   f"{by_length.MIN_SENTENCES_FOR_TEST} sentences")
    p.add_argument("--by-length-of", metavar="src|ref|hyp",
                   help="with --by-length: bucket by the length of the source (src, default), of the reference "
                   "(ref: every system on the same sentences, paired tests per bucket) or of each system's own "
                   "output (hyp: scores and bootstrap intervals per system, no paired test, so not with --ar-trials)")
    p.add_argument("--train-max-len", metavar="N", help="with --by-length: the longest training sentence (source "
                   "words); buckets beyond it are labelled and shaded")
    p.add_argument("--plot", metavar="FILE.png", help="with --by-length: one panel per metric, score per bucket "
                   "with 95%% bootstrap intervals")


def check_length_args(args) -> Tuple[Optional[object], Optional[int]]:
    """(edges or "auto" or None, train_max_len or None); ValueError naming the flag. Then sets
    ``args.ar_trials`` to its default (10000) where it was not given."""
    out = by_length.check_flags(args.by_length, args.src, args.plot, args.train_max_len, args.by_length_of,
                                args.ar_trials)
    if args.ar_trials is None:
        args.ar_trials = AR_TRIALS_DEFAULT
    return out


AR_TRIALS_DEFAULT = 10000


def segments_of(rows: Sequence[Dict], metrics: Sequence[str]) -> Dict[str, list]:
    """``{key: [each system's segment scores]}`` of the segment metrics (COMET) of the main table."""
    return {k: [r[f"{k}_segments"] for r in rows] for k in metrics if f"{k}_segments" in rows[0]}


def score_buckets(args, edges, train_max_len, refs, systems, sources, metrics, segments, signers) -> Dict:
    """The ``by_length`` object (:func:`by_length.scores_by_length`) with the command's test settings."""
    return by_length.scores_by_length(refs, systems, sources, edges, args.tokenize, args.bs_samples,
                                      args.ar_trials, metrics=metrics, segments=segments, signers=signers,
                                      train_max_len=train_max_len,
                                      length_of=by_length.parse_length_of(args.by_length_of))


def length_markdown(data: Dict) -> str:
    """The table and its legend, printed after the main table."""
    return by_length.format_markdown(data) + "\n\n" + "\n".join(by_length.legend_lines(data))


def draw_plot(data: Dict, path: Optional[str]) -> None:
    if path:
        by_length.plot(data, path)
        print(f"scores by length: {path}")
