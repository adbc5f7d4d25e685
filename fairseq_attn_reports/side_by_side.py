"""Table 1 rows' training speed measured side by side: a ``fairseq-attn-bench --json`` report read
for the efficiency claim (``fairseq-attn-paper claims --speed BENCH.json``; torch-free).

The benchmark trains every system in one process, interleaved: round r measures each once, in a
rotated order, on the same batches (docs/explanation/benchmark.md). A row's slowdown in a round is
``1 - (its tokens/s) / (the baseline's tokens/s)`` in that round; on the same batches that is the
ratio of steps per second. A report is refused, in one line naming the file and what is wrong,
when it is no training measurement, lacks a row the claim needs (or could not build it), or was
measured at another model size than the runs: a row's parameters there must equal those its
runs counted (``params`` of the Table 1 JSON), which holds only with the runs' sizes and
vocabularies (``--preset bible --data-bin DIR`` for the bible's).
"""

import json
from typing import Dict, Sequence

from .table1 import BASELINE, ROW_BY_KEY


def read_bench(path: str, rows: Dict[str, Dict], needed: Sequence[str]) -> Dict:
    """``{"path", "rounds", "threads", "preset", "device", "dtype", "data", "rows": {key: {"params",
    "slowdowns", "system"}}}`` for every row of ``rows`` (``{key: {"params": int}}``) the report
    measured; ``needed`` (the baseline among them) must all be there."""
    try:
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"--speed {path}: no such file") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"--speed {path}: not a JSON report of fairseq-attn-bench ({e})") from None
    train = report.get("train") if isinstance(report, dict) else None
    if not isinstance(train, dict) or not isinstance(report.get("systems"), list):
        raise ValueError(f"--speed {path}: no training measurement in it (fairseq-attn-bench --json, mode train)")
    by_arch = {s.get("arch"): s for s in report["systems"]}
    meta = report.get("meta") or {}
    out = {"path": path, "rounds": train.get("rounds"), "threads": meta.get("threads"), "preset": meta.get("preset"),
           "device": meta.get("device"), "dtype": meta.get("dtype"), "data": meta.get("data"), "rows": {}}
    for key in [BASELINE] + [k for k in needed if k != BASELINE]:
        arch = ROW_BY_KEY[key].arch
        if arch not in by_arch:
            raise ValueError(f"--speed {path}: no measurement of Table 1 row {key} ({arch}); it measured "
                             f"{', '.join(a for a in by_arch if a)}")
        if "error" in by_arch[arch] or by_arch[arch].get("name") not in train.get("systems", {}):
            raise ValueError(f"--speed {path}: Table 1 row {key} ({arch}) was not measured there: "
                             f"{by_arch[arch].get('error', 'no training figures')}")
    base = train["systems"][by_arch[ROW_BY_KEY[BASELINE].arch]["name"]]["tokens_per_s"]["runs"]
    for key, row in rows.items():
        entry = by_arch.get(ROW_BY_KEY[key].arch) if key in ROW_BY_KEY else None
        if entry is None or entry.get("name") not in train["systems"]:
            continue
        if entry.get("params") != row["params"]:
            data = out["data"] or {}
            raise ValueError(f"--speed {path}: measured at another model size than the runs: row {key} has "
                             f"{_count(entry.get('params'))} parameters there (preset {out['preset']}, vocabularies "
                             f"{data.get('vocab')}), {_count(row['params'])} in its runs; measure with the runs' "
                             f"preset and their data-bin (--preset bible --data-bin DIR)")
        runs = train["systems"][entry["name"]]["tokens_per_s"]["runs"]
        out["rows"][key] = {"system": entry["name"], "params": entry["params"],
                            "slowdowns": [1.0 - a / b for a, b in zip(runs, base)]}
    return out


def _count(n) -> str:
    return f"{n:,}" if isinstance(n, int) else "no count of"


def describe(bench: Dict) -> str:
    """``BENCH.json (fairseq-attn-bench, preset bible, 7 interleaved rounds, 1 thread(s), cpu fp32)``."""
    return (f"{bench['path']} (fairseq-attn-bench, preset {bench['preset']}, {bench['rounds']} interleaved rounds, "
            f"{bench['threads']} thread(s), {bench['device']} {bench['dtype']})")
