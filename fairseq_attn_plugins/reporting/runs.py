"""Runs as the reporting commands see them: identity from the run record, never from a name.

A run folder's identity comes from its run record (``run.json``, written by the recipes'
train.sh and evaluate.sh and by the demo, see :mod:`fairseq_attn_records.run_record`), and
from nothing else. Every consumer (results table, seeds, Table 1, Figures 2-3) goes through here:

* :func:`load_runs` -- the same run given twice (the same folder under two spellings, ``x``
  and ``./x/``, a link, or a copy: the same ``run_id``) is an error naming both;
* :meth:`Run.hyp_for` -- the translations of the subset whose reference is the one given
  (by content): a validation output is never scored against the test reference;
* :meth:`Run.expect` -- a row or label whose run does not match (architecture, a model flag)
  is an error naming both;
* :func:`comparability` -- runs trained on different data, for different numbers of updates
  or with different effective batches: one note each, shown with the table.
"""

import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_attn_records import run_record


class Run:
    def __init__(self, given: str):
        self.given = given
        self.path = os.path.realpath(given)
        if not os.path.isdir(self.path):
            raise FileNotFoundError(f"{given}: no such run folder")
        self.record = run_record.load(self.path)  # a broken record: RecordError (a ValueError)

    def identity(self) -> Optional[Dict]:
        """The run record, or None (nothing to tell)."""
        return self.record

    @property
    def arch(self) -> Optional[str]:
        ident = self.identity()
        return ident.get("arch") if ident else None

    def describe(self) -> str:
        return f"{self.given} (trained as {self.arch or 'an unknown architecture'})"

    # ------------------------------------------------------------ outputs
    def hyp_for(self, ref_path: str) -> Tuple[str, Dict]:
        """(hyp path, evaluation) of the subset evaluated against ``ref_path`` (same content)."""
        evals = (self.record or {}).get("evaluations") or {}
        if evals:
            digest = run_record.file_sha256(ref_path)
            for subset, ev in sorted(evals.items(), key=lambda kv: kv[0] != "test"):
                if ev.get("ref_sha256") == digest:
                    return os.path.join(self.path, ev["hyp"]), dict(ev, subset=subset)
            done = "; ".join(f"{s} against {ev.get('ref')}" for s, ev in sorted(evals.items()))
            raise ValueError(f"run {self.given}: no evaluation against {ref_path} (evaluated: {done}); "
                             f"give the reference of an evaluated subset, or evaluate that subset "
                             f"(EVAL_SUBSET=...)")
        hyp = os.path.join(self.path, "hyp.txt")
        scores = {}
        scores_path = os.path.join(self.path, "scores.json")
        if os.path.isfile(scores_path):  # a run evaluated before per-subset outputs: its ref is recorded
            with open(scores_path, encoding="utf-8") as f:
                scores = json.load(f)
            scored = scores.get("ref")
            if scored and not _same_text(scored, ref_path):
                raise ValueError(f"run {self.given}: {hyp} was scored against {scored} (scores.json), "
                                 f"not {ref_path}; give that reference, or evaluate the run on this one")
        if not os.path.isfile(hyp):
            raise FileNotFoundError(f"run {self.given}: {hyp} is missing (train and evaluate the run first)")
        return hyp, scores

    # ------------------------------------------------------------ identity checks
    def expect(self, label: str, arch: Optional[str] = None, arch_contains: Optional[str] = None,
               flags: Optional[Dict] = None) -> None:
        """Raise naming ``label`` and this run unless the run is what the label says."""
        ident = self.identity()
        if ident is None:
            raise ValueError(f"{label}: {self.given} has no run record (run.json) that says what it "
                             f"trained; train it with the recipes' train.sh (it records a run it finds "
                             f"without one) or the demo")
        got = ident.get("arch")
        if arch is not None and got != arch:
            raise ValueError(f"{label} expects a run of {arch}, but {self.given} trained {got}")
        if arch_contains is not None and arch_contains not in (got or ""):
            raise ValueError(f"{label} expects a {arch_contains} run, but {self.given} trained {got}")
        model = ident.get("model") or {}
        for flag, want in (flags or {}).items():
            have = model.get(flag)
            if have != want:
                raise ValueError(f"{label} expects --{flag.replace('_', '-')} {want}, but {self.given} "
                                 f"was trained with {have} ({got})")


def _same_text(a: str, b: str) -> bool:
    if os.path.isfile(a) and os.path.isfile(b):
        return run_record.file_sha256(a) == run_record.file_sha256(b)
    return os.path.realpath(a) == os.path.realpath(b)


def check_distinct(runs: Sequence[Run]) -> None:
    seen: Dict[Tuple[str, str], Run] = {}
    for r in runs:
        keys = [("folder", r.path)] + ([("run_id", r.record["run_id"])] if r.record and r.record.get("run_id") else [])
        for key in keys:
            if key in seen:
                why = (f"both are the folder {r.path}" if key[0] == "folder"
                       else f"both hold run {key[1][:12]}: one is a copy of the other")
                raise ValueError(f"{seen[key].given} and {r.given} are the same run ({why}); give each run once")
            seen[key] = r


def load_runs(dirs: Sequence[str]) -> List[Run]:
    runs = [Run(d) for d in dirs]
    check_distinct(runs)
    return runs


def trained_as(run: Run, evaluation: Optional[Dict] = None, log_updates: Optional[int] = None) -> Dict:
    """What to compare between runs: updates (of the evaluated checkpoints, else the newest
    checkpoint, else the training log), data-bin and effective batch (None where unknown)."""
    rec = run.record or {}
    updates = (evaluation or {}).get("num_updates") or rec.get("num_updates") or log_updates
    data = rec.get("data") or {}
    return {"updates": updates, "data_id": data.get("data_id"), "data": data.get("path"),
            "tokens_per_update_max": (rec.get("batch") or {}).get("tokens_per_update_max")}


def comparability(names: Sequence[str], trained: Sequence[Dict]) -> List[str]:
    """One note per way the runs differ in how they were trained (empty: nothing differs that is known)."""
    notes = []
    for key, what in (("updates", "updates"), ("data_id", "data-bin"),
                      ("tokens_per_update_max", "effective batch (tokens per update)")):
        values = [t.get(key) for t in trained]
        if len({v for v in values if v is not None}) > 1:
            shown = [(t.get("data") or "?") + f" ({v[:12]})" if key == "data_id" and v else v for t, v in zip(trained, values)]
            notes.append(f"{what} differ: " + ", ".join(f"{n} {'?' if v is None else v}" for n, v in zip(names, shown)))
    return notes
