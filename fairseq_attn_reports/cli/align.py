"""fairseq-attn-align: the cross-attention of a trained model as word alignment, scored (AER)
against gold alignments, with eflomal beside it.

    fairseq-attn-align RUN_DIR [--out RUN_DIR/align] [--per-head] [--eflomal]
    fairseq-attn-align --checkpoint CK.pt --data DATA --out OUT
    fairseq-attn-align --eflomal --data DATA --out OUT          # eflomal only

For every scored subset (``--subsets``, default ``valid,test``) the reference is force-decoded
(teacher forcing), each decoder layer's cross-attention read (heads averaged; each head too with
``--per-head``), subword rows and columns averaged into words of the data folder's raw lines
(``DATA/raw/SUBSET.{src,tgt}``), and every target word linked to its argmax source word at the
step that outputs it (``naive``) and at the step after (``shift``, Shift-Att, Chen et al. 2020).
Writes ``OUT/SUBSET/alignments.METHOD.LAYER.txt`` (Pharaoh, the gold's indexing; a head:
``LAYER.hHEAD``) and ``OUT/aer.json``: AER, precision and recall (percent) per subset, method
and layer; the layer and method of lowest AER on valid and its test figures (``chosen``); with
``--eflomal`` eflomal's; and always ``diagonal`` (target word j linked to source word
round(j * n_src / n_tgt): what word positions alone give). See docs/howto/alignment.md.

Gold (``--gold``): ``bible`` (default) reads ``DATA/raw/SUBSET.align``, written by the bible
corpus step (a data folder of another corpus is refused); a folder reads ``FOLDER/SUBSET.align``.
Every link is sure (AER = 1 - F1).

A run folder names its model through its run record (``run.json``): the checkpoint its test
evaluation scored (the averaged one), else its newest checkpoint, and the data folder it was
trained on. Bad input ends with one line naming the file or flag; OUT is written aside and
renamed whole (an existing OUT is replaced only with ``--yes``).
"""

import argparse
import sys
from typing import List, Optional

from fairseq_attn_records.command_line import Parser
from fairseq_attn_records import run_record
from fairseq_attn_records.alignment import AlignmentError

from ..alignment_evaluation import AlignInputError, align, summary


def get_parser() -> argparse.ArgumentParser:
    p = Parser(prog="fairseq-attn-align", description=__doc__.split("\n\n")[0])
    p.add_argument("run", nargs="?", help="run folder (its run.json names checkpoint and data)")
    p.add_argument("--checkpoint", help="checkpoint file (default: the run's evaluated checkpoint)")
    p.add_argument("--data", help="data folder (default: the run's); its raw/ holds the scored lines")
    p.add_argument("--gold", default="bible", help="'bible' (DATA/raw/SUBSET.align of the bible corpus) "
                   "or a folder holding SUBSET.align (Pharaoh)")
    p.add_argument("--subsets", default="valid,test", help="subsets to score; valid chooses layer and "
                   "method (default valid,test)")
    p.add_argument("--layers", default="all", help="decoder layers to read: 'all' or e.g. 1,2 (0-based)")
    p.add_argument("--per-head", action="store_true", help="also every head of every layer read")
    p.add_argument("--eflomal", action="store_true", help="also eflomal (train + the subset, both "
                   "directions, grow-diag-final-and)")
    p.add_argument("--out", help="output folder (default RUN/align)")
    p.add_argument("--yes", action="store_true", help="replace an existing --out folder")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of torch (default 1: one sentence "
                   "at a time gains nothing from more, and loses much on a shared CPU)")
    p.add_argument("--user-dir", default=None, help="extra fairseq --user-dir to import")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    parser = get_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.exit(2, f"fairseq-attn-align: error: unknown argument {unknown[0]}\n")  # a usage error
    try:
        result = align(args)
    except (AlignInputError, AlignmentError, run_record.RecordError) as e:
        sys.exit(f"fairseq-attn-align: {e}")
    print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
