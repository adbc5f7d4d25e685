"""The AER column of ``fairseq-attn-results --align``: each run's cross-attention alignment of the
test set (the layer and method its ``fairseq-attn-align`` output chose on valid,
``RUN/align/aer.json``) scored against the gold and tested against the baseline's with the same
resamples as every other metric (:func:`fairseq_attn_records.alignment.paired_aer_tests`).

Every run must have been aligned against the same gold file (sha256) and the reference the
table scores (sha256 of the test reference); otherwise the column is refused in one line.
"""

import json
import os
from typing import Dict, List, Sequence

from fairseq_attn_records import metrics as M
from fairseq_attn_records import run_record
from fairseq_attn_records.alignment import AlignmentError, paired_aer_tests, read_pharaoh


def _aligned(name: str, run_dir: str, ref_sha: str) -> Dict:
    path = os.path.join(run_dir, "align", "aer.json")
    if not os.path.isfile(path):
        raise ValueError(f"--align: run {name!r} has no {path}: run fairseq-attn-align {run_dir} first")
    with open(path, encoding="utf-8") as f:
        res = json.load(f)
    chosen = (res.get("chosen") or {}).get("attention")
    gold = (res.get("gold_files") or {}).get("test")
    if not chosen or not gold:
        raise ValueError(f"--align: {path} has no test alignment chosen on valid (align valid,test)")
    if gold["reference_sha256"] != ref_sha:
        raise ValueError(f"--align: {path} aligned another test reference than --ref")
    return {"aer_json": path, "name": chosen["name"], "gold": gold,
            "file": os.path.join(run_dir, "align", "test", f"alignments.{chosen['name']}.txt")}


def aligned_runs(names: Sequence[str], runs: Sequence[str], ref_path: str) -> List[Dict]:
    """What each run's ``align/aer.json`` chose, checked (one line on a refusal): read before the
    table is scored, so a run that cannot have the column is refused before the long work."""
    ref_sha = run_record.file_sha256(ref_path)
    infos = [_aligned(name, d, ref_sha) for name, d in zip(names, runs)]
    golds = {i["gold"]["sha256"] for i in infos}
    if len(golds) != 1:
        raise ValueError("--align: the runs were aligned against different gold files: "
                         + ", ".join(f"{i['aer_json']} ({i['gold']['path']})" for i in infos))
    return infos


def add_aer_column(table: Dict, infos: Sequence[Dict], ref_path: str) -> List[str]:
    """Adds the ``aer`` metric to the table (scores, deltas, marks of every row) from the runs'
    :func:`aligned_runs`, in the rows' order; returns the note."""
    with open(ref_path, encoding="utf-8") as f:
        tgt = f.read().splitlines()
    src_path = infos[0]["gold"]["source"]
    with open(src_path, encoding="utf-8") as f:
        src = f.read().splitlines()
    try:
        gold = read_pharaoh(infos[0]["gold"]["path"], src, tgt)
        systems = [(r["system"], read_pharaoh(i["file"], src, tgt)) for r, i in zip(table["rows"], infos)]
    except AlignmentError as e:
        raise ValueError(f"--align: {e}") from None
    cells = paired_aer_tests(gold, systems, table["bs_samples"], table["ar_trials"])
    base = cells[0]
    for r, cell, info in zip(table["rows"], cells, infos):
        is_base = cell is base
        r["scores"]["aer"] = dict(cell, alignment=info["name"])
        r["deltas"]["aer"] = None if is_base else cell["score"] - base["score"]
        r["marks"]["aer"] = "" if is_base else M.metric_mark("aer", cell, base["score"])
    table["metrics"] = list(table["metrics"]) + ["aer"]
    table["labels"] = dict(table["labels"], aer=M.label("aer"))
    return ["AER: alignment error rate (%, lower is better) of each system's cross-attention on the test set "
            "against the gold word alignments (every link sure: AER = 1 - F1), with the layer and method its "
            "fairseq-attn-align chose on valid: " + ", ".join(f"{r['system']} {i['name']}"
                                                               for r, i in zip(table["rows"], infos)) + "."]
