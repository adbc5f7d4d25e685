"""``python -m fairseq_attn_reports.cli.by_concat --study-json lengths.json --study-md lengths.md
--info concat.json --k 1=lengths.json --k 2=k2.json ... [--plot FILE.png]``: the per-k table of the long-input study
(:mod:`fairseq_attn_reports.by_concat`) added to the study's JSON (``concat``) and markdown,
each written whole; the table printed."""

import argparse
import json
import os
import sys

from .. import by_concat
from fairseq_attn_records.output_files import write_json, write_text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fairseq_attn_reports.cli.by_concat", description=__doc__)
    p.add_argument("--study-json", required=True, help="the study's lengths.json (fairseq-attn-results --json)")
    p.add_argument("--study-md", required=True, help="the study's lengths.md")
    p.add_argument("--info", help="concat-test's concat.json (the documents)")
    p.add_argument("--k", action="append", default=[], metavar="K=FILE.json",
                   help="the main table (fairseq-attn-results --json) of the inputs of k segments")
    p.add_argument("--plot", metavar="FILE.png", help="scores and length ratio against k, one line per system")
    args = p.parse_args(argv)
    try:
        tables = by_concat.load_tables(args.k)
        info = None
        if args.info and os.path.isfile(args.info):
            with open(args.info, encoding="utf-8") as f:
                info = json.load(f)
        with open(args.study_json, encoding="utf-8") as f:
            study = json.load(f)
        study["concat"] = by_concat.concat_section(tables, info)
        section = by_concat.format_markdown(study["concat"])
        md = open(args.study_md, encoding="utf-8").read() if os.path.isfile(args.study_md) else ""
    except (OSError, ValueError, KeyError) as e:
        print(f"by_concat: error: {e}", file=sys.stderr)
        return 2
    write_json(args.study_json, study)
    write_text(args.study_md, by_concat.replace_section(md, section))
    if args.plot:
        by_concat.plot(study["concat"], args.plot)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
