"""fairseq-attn-export: write a trained checkpoint for a deployment engine.

    fairseq-attn-export DATA_BIN --path CK/checkpoint_best.pt --to ct2 [--output-dir DIR]
        [--quantization int8] [--force]

``--to ct2``: a CTranslate2 model directory (default ``CK/checkpoint_best.ct2``), for the
architectures CTranslate2 represents exactly: the baseline, ``relpos`` (kv, k, tied; with or
without absolute positions where CTranslate2 can express them), ``temp`` (folded into the
projections) and ``dropattn_*`` (identity at inference). Any other piece is refused with a
one-line reason. Translate with ``ctranslate2.Translator(DIR).translate_batch(...)`` on
BPE'd source tokens; see :mod:`fairseq_attn_plugins.export.ct2`.
"""

import argparse
import os
import sys
from typing import List, Optional

from fairseq_attn_records.command_line import Parser

from .. import registration

TARGETS = ("ct2",)


def get_parser() -> argparse.ArgumentParser:
    p = Parser(prog="fairseq-attn-export", description=__doc__.split("\n\n")[0])
    p.add_argument("data", help="fairseq binarized data dir (for the dictionaries)")
    p.add_argument("--path", required=True, help="checkpoint file (.pt)")
    p.add_argument("--to", required=True, choices=TARGETS, help="target engine: ct2 (CTranslate2)")
    p.add_argument("--output-dir", default=None,
                   help="output directory (default: the checkpoint's path with .ct2 instead of .pt)")
    p.add_argument("--quantization", default=None,
                   help="CTranslate2 weight type written (int8, int8_float32, int16, float16, ...; "
                        "default float32). A float32 export can also be quantised when loaded "
                        "(Translator(..., compute_type='int8'))")
    p.add_argument("--force", action="store_true", help="replace an existing output directory")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    if not os.path.isfile(args.path):
        sys.exit(f"fairseq-attn-export: checkpoint not found: {args.path}")
    if not os.path.isdir(args.data):
        sys.exit(f"fairseq-attn-export: data dir not found: {args.data}")
    out = args.output_dir or os.path.splitext(args.path)[0] + ".ct2"
    registration.register()
    from ..export.ct2 import ExportError, export_ct2

    try:
        export_ct2(args.data, args.path, out, quantization=args.quantization, force=args.force)
    except ExportError as e:
        sys.exit(f"fairseq-attn-export: {args.path}: {e}")
    print(f"fairseq-attn-export: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
