"""``python -m fairseq_attn_reports.cli.by_concat --study-json lengths.json --study-md lengths.md
--info concat.json --k 1=lengths.json --k 2=k2.json ... [--segmentwise DIR] [--prepare prepare.json]
[--plot FILE.png]``: the per-k table of the long-input study (:mod:`fairseq_attn_reports.by_concat`)
added to the study's JSON (``concat``) and markdown, each written whole; the table printed.

``--segmentwise DIR``: the segment-by-segment row of every system at every k > 1 (its k = 1 outputs
joined per group of concat-test's record, written under DIR) and its paired test against the joined
input. ``--prepare``: the prepare.json of the data the systems were trained on (the cap and the joined
pairs of TRAIN_CONCAT, said under the table). With COMET in the tables (COMET_MODEL), the inputs longer
than COMET's window are counted per k beside its column."""

import json
import os
import sys

from fairseq_attn_records.command_line import Parser
from fairseq_attn_records import comet as comet_metric
from fairseq_attn_records.output_files import write_text

from .. import by_concat
from ..study_paths import load_table, relative, write_table


def main(argv=None) -> int:
    p = Parser(prog="python -m fairseq_attn_reports.cli.by_concat", description=__doc__)
    p.add_argument("--study-json", required=True, help="the study's lengths.json (fairseq-attn-results --json)")
    p.add_argument("--study-md", required=True, help="the study's lengths.md")
    p.add_argument("--info", help="concat-test's concat.json (the documents and the groups)")
    p.add_argument("--k", action="append", default=[], metavar="K=FILE.json",
                   help="the main table (fairseq-attn-results --json) of the inputs of k segments")
    p.add_argument("--segmentwise", metavar="DIR", help="add the segment-by-segment rows (needs --info and k = 1); "
                   "their outputs are written under DIR")
    p.add_argument("--prepare", metavar="FILE", help="prepare.json of the systems' training data")
    p.add_argument("--tokenize", default="13a", help="sacreBLEU tokeniser of the tables (13a)")
    p.add_argument("--comet-batch-size", type=int, help="COMET batch size (default COMET_BATCH_SIZE or 16)")
    p.add_argument("--plot", metavar="FILE.png", help="scores and length ratio against k, one line per system")
    args = p.parse_args(argv)
    try:
        tables = by_concat.load_tables(args.k)
        info = None
        if args.info and os.path.isfile(args.info):
            with open(args.info, encoding="utf-8") as f:
                info = json.load(f)
        if args.segmentwise and info is None:
            raise ValueError("--segmentwise needs --info (concat-test's record of the groups)")
        training = None
        if args.prepare:
            with open(args.prepare, encoding="utf-8") as f:
                training = by_concat.training_note(json.load(f))
        study = load_table(args.study_json)
        comet = None
        if any("comet" in t["metrics"] for t in tables.values()):
            path = comet_metric.model_path_from_env()
            if path is None:
                raise ValueError("the tables hold COMET: set COMET_MODEL to the checkpoint they were scored with")
            comet = comet_metric.load(path, batch_size=args.comet_batch_size)
        study["concat"] = by_concat.concat_section(tables, info, training)
        if info is not None:
            study["concat"]["info"] = os.path.abspath(args.info)  # the groups (re-scoring joins by them)
        if args.segmentwise:
            first = {k: v["first_lines"] for k, v in (info.get("k") or {}).items()}
            by_concat.add_segmentwise(study["concat"], first, args.segmentwise, args.tokenize, comet)
        if comet is not None:
            by_concat.add_comet_window(study["concat"], comet)
        # the markdown names the documents' file relative to its own folder, as the JSON does
        section = by_concat.format_markdown(relative(study["concat"], os.path.dirname(os.path.abspath(args.study_md))))
        md = open(args.study_md, encoding="utf-8").read() if os.path.isfile(args.study_md) else ""
    except (OSError, ValueError, KeyError) as e:
        print(f"by_concat: error: {e}", file=sys.stderr)
        return 1
    write_table(args.study_json, study)
    write_text(args.study_md, by_concat.replace_section(md, section))
    if args.plot:
        by_concat.plot(study["concat"], args.plot)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
