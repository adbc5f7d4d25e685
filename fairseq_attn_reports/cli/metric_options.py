"""The metric flags and the COMET scorer shared by the reporting commands
(``fairseq-attn-significance``, ``-results``, ``-paper``)."""

import argparse
import sys

from fairseq_attn_records import comet as comet_metric
from fairseq_attn_records.metrics import METRICS_HELP, tokenizers


class MadeWhenPrinted:
    """A value of a help text (``%(name)s``) made when the help is printed, not when the parser is built."""

    def __init__(self, make):
        self.make = make

    def __str__(self) -> str:
        return self.make()


def add_metric_args(p: argparse.ArgumentParser) -> None:
    """The metric flags shared by the reporting commands."""
    p.add_argument("--metrics", default="bleu,chrf", help=METRICS_HELP)
    tokenize = p.add_argument("--tokenize", default="13a", help="sacreBLEU tokeniser for BLEU: %(tokenizers)s "
                              "(13a; zh for Chinese, ja-mecab for Japanese)")
    # sacreBLEU's names: read from sacreBLEU (0.15 s of CPU to import) by --help alone, not by every start
    tokenize.tokenizers = MadeWhenPrinted(lambda: ", ".join(tokenizers()))
    p.add_argument("--comet-batch-size", type=int, help="COMET batch size (default COMET_BATCH_SIZE or 16)")
    p.add_argument("--no-comet-hint", action="store_true",
                   help="without COMET_MODEL, do not say how to add COMET (a study's steps: it says so once)")


def load_comet(args, prog: str, needs_src: bool = True):
    """The COMET scorer when COMET_MODEL is set (loaded before any other work), else None
    (:func:`print_comet_hint` then says how to enable it, once the results are out)."""
    path = comet_metric.model_path_from_env()
    if path is None:
        return None
    if needs_src and not getattr(args, "src", None):
        raise ValueError("COMET_MODEL is set: give the source sentences with --src FILE (COMET reads them)")
    return comet_metric.load(path, batch_size=args.comet_batch_size)


def print_comet_hint(prog: str, comet, args=None) -> None:
    if comet is None and not getattr(args, "no_comet_hint", False):
        print(f"{prog}: {comet_metric.ENABLE_HINT}", file=sys.stderr)
