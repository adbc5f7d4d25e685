"""Runs as the reporting commands see them: identity from the run record, never from a name.

A run folder's identity comes from its run record (``run.json``, written by the recipes'
train.sh and evaluate.sh and by the demo, see :mod:`fairseq_attn_records.run_record`), and
from nothing else. Every consumer (results table, seeds, Table 1, Figures 2-3) goes through here:

* :func:`load_runs` -- the same run given twice (the same folder under two spellings, ``x``
  and ``./x/``, a link, or a copy: the same ``run_id`` at the same update) is an error naming both;
* :meth:`Run.hyp_for` -- the translations of the subset whose reference is the one given
  (by content): a validation output is never scored against the test reference; the file must
  be the one the record scored (sha256), and an evaluation older than the run's newest
  checkpoint is told (:func:`stale_notes`, ``‡`` in every table);
* :class:`Run` -- a record that contradicts itself (``arch`` against ``model.arch``) or its
  newest checkpoint's configuration (architecture, pieces, piece flags) is an error naming both
  (:func:`check_record_against_checkpoint`);
* :meth:`Run.trained_model` -- the architecture and active pieces the record says the run
  trained, the system column of every table (:func:`model_cell`; ``?`` without a record);
* :meth:`Run.expect` -- a row or label whose run does not match (architecture, a model flag)
  is an error naming both;
* :func:`comparability` -- runs trained on different data, for different numbers of updates
  or with different effective batches: one note each, shown with the table.
"""

import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_attn_records import checkpoint_config, run_record

from . import declared_pieces


class Run:
    def __init__(self, given: str):
        self.given = given
        self.path = os.path.realpath(given)
        if not os.path.isdir(self.path):
            raise FileNotFoundError(f"{given}: no such run folder")
        self.record = run_record.load(self.path)  # a broken record: RecordError (a ValueError)
        if self.record is not None:
            check_record_against_checkpoint(self.path, self.record)

    def identity(self) -> Optional[Dict]:
        """The run record, or None (nothing to tell)."""
        return self.record

    @property
    def arch(self) -> Optional[str]:
        ident = self.identity()
        return ident.get("arch") if ident else None

    def trained_model(self) -> Optional[Dict]:
        """``{"arch", "pieces", "pieces_per_layer"}`` from the record's resolved model flags
        (:func:`fairseq_attn_core.catalogue.model_pieces`, the rule ``fairseq-attn-pieces`` and the
        model build use; kept per model: :mod:`.declared_pieces`), or None without a record."""
        if self.record is None:
            return None
        try:
            return declared_pieces.model_pieces(dict(self.record.get("model") or {}, arch=self.arch))
        except declared_pieces.UnknownPieces as e:
            raise run_record.RecordError(f"{run_record.record_path(self.path)}: {e}") from None

    def describe(self) -> str:
        return f"{self.given} (trained as {self.arch or 'an unknown architecture'})"

    # ------------------------------------------------------------ outputs
    def hyp_for(self, ref_path: str) -> Tuple[str, Dict]:
        """(hyp path, evaluation) of the subset evaluated against ``ref_path`` (same content)."""
        evals = (self.record or {}).get("evaluations") or {}
        if evals:
            digest = run_record.file_sha256(ref_path)
            # the run's own evaluation before a learning curve's single checkpoint (curve/u<U>/<subset>, the
            # same reference), and test first
            for subset, ev in sorted(evals.items(), key=lambda kv: (kv[0].startswith("curve/"), kv[0] != "test")):
                if ev.get("ref_sha256") == digest:
                    hyp = run_record.check_evaluation(self.path, subset, ev)  # the file it scored
                    stale = run_record.stale_evaluation(self.path, self.record, ev)
                    return hyp, dict(ev, subset=subset, stale=stale)
            done = "; ".join(_evaluated_against(s, ev) for s, ev in sorted(evals.items()))
            raise ValueError(f"run {self.given}: no evaluation against {ref_path} (sha256 {digest[:12]}; "
                             f"evaluated: {done}); give the reference of an evaluated subset, or evaluate "
                             f"that subset (EVAL_SUBSET=...)")
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


UNKNOWN_MODEL = "?"
MODEL_HEADER = "Architecture: pieces"


def model_cell(trained: Optional[Dict]) -> str:
    """``ARCH: PIECE,PIECE`` (``none``: no piece), or ``?`` for a run without a record."""
    if trained is None:
        return UNKNOWN_MODEL
    return f"{trained['arch']}: {','.join(trained['pieces']) or 'none'}"


def model_legend(cells: Sequence[str]) -> str:
    """The legend line of the model column (``?`` explained when a row shows it)."""
    line = (f"{MODEL_HEADER}: the architecture and active attention pieces each run's record "
            f"(run.json) says it trained, whatever its folder is called (per layer in --json)")
    if UNKNOWN_MODEL in cells:
        line += f"; {UNKNOWN_MODEL}: no run record (an older run folder, or a translations file), so the architecture is unknown"
    return line + "."


def check_record_against_checkpoint(run_dir: str, rec: Dict) -> None:
    """The record's architecture must be its own ``model.arch``, and its architecture, active
    pieces (``attn_pieces``) and piece flags those of the configuration its newest checkpoint
    holds (read memory-mapped through the checkpoint allowlist); RecordError naming both sides
    otherwise (a record edited by hand, or copied beside another run's checkpoints)."""
    path = run_record.record_path(run_dir)
    arch, model_arch = rec.get("arch"), (rec.get("model") or {}).get("arch")
    if model_arch is not None and arch != model_arch:
        raise run_record.RecordError(
            f"{path}: arch {arch!r} contradicts model.arch {model_arch!r} in the same record; the record "
            f"was changed after training: restore it, or re-train the run")
    ckpt = _newest_save_point(run_dir, rec)
    if ckpt is None:
        return
    held = _identity_of_checkpoint(ckpt)
    # what the run is: its architecture, active pieces and their flags (other model flags may be
    # derived by the model build, e.g. relpos turns absolute positions off, and differ legitimately)
    keys = set(declared_pieces.piece_flag_names()) | {"attn_pieces"}
    pieces = lambda model: {k: v for k, v in model.items() if k in keys}
    diff = run_record.differences({"arch": arch, "model": pieces(rec.get("model") or {})},
                                  {"arch": held["arch"], "model": pieces(held["model"])},
                                  labels=(f"in {run_record.RECORD}", f"in {os.path.basename(ckpt)}"))
    if diff:
        raise run_record.RecordError(
            f"{path} contradicts the configuration of its checkpoint {ckpt}: " + "; ".join(diff) +
            "; the record was changed after training or belongs to another run: restore it, or re-train the run")


def _identity_of_checkpoint(path: str) -> Dict:
    """Identity from the configuration a checkpoint holds: read without torch and fairseq where
    :mod:`fairseq_attn_records.checkpoint_config` can, else by the plugin (its answer or its
    one-line error)."""
    state = checkpoint_config.state_without_tensors(path)
    if state is not None and state.get("cfg") is not None:
        return run_record.identity_of_cfg(state["cfg"])
    from fairseq_attn_plugins.checkpoint_identity import identity_of_checkpoint  # torch, fairseq
    return identity_of_checkpoint(path)


def _newest_save_point(run_dir: str, rec: Dict) -> Optional[str]:
    points = run_record.save_points(rec.get("checkpoints") or {})
    for name in [p["file"] for p in reversed(points)] + ["checkpoint_last.pt"]:
        if os.path.isfile(os.path.join(run_dir, name)):
            return os.path.join(run_dir, name)
    return None


def _evaluated_against(subset: str, ev: Dict) -> str:
    """``test against X``, saying when X's content changed since (same path, another sha256)."""
    ref, want = ev.get("ref"), ev.get("ref_sha256") or ""
    if ref and os.path.isfile(ref) and want and run_record.file_sha256(ref) != want:
        return f"{subset} against {ref} as it was then (sha256 {want[:12]}; its content changed since)"
    return f"{subset} against {ref} (sha256 {want[:12]})"


def stale_notes(names: Sequence[str], evaluations: Sequence[Dict]) -> List[str]:
    """One note per run whose evaluation is older than its newest checkpoint (``‡`` marks its row)."""
    return [f"‡ {n}: evaluated before its newest checkpoint ({ev['stale']}); re-run evaluate.sh"
            for n, ev in zip(names, evaluations) if (ev or {}).get("stale")]


def _same_text(a: str, b: str) -> bool:
    if os.path.isfile(a) and os.path.isfile(b):
        return run_record.file_sha256(a) == run_record.file_sha256(b)
    return os.path.realpath(a) == os.path.realpath(b)


def check_distinct(runs: Sequence[Run]) -> None:
    seen: Dict[Tuple[str, str], Run] = {}
    for r in runs:
        # copies of a run share its run_id: the same run where they hold it at the same update (a copy
        # trained further gets a run_id of its own; the run itself trained on is another point of it)
        keys = [("folder", r.path)] + ([("run_id", r.record["run_id"], r.record.get("num_updates"))]
                                       if r.record and r.record.get("run_id") else [])
        for key in keys:
            if key in seen:
                why = (f"both are the folder {r.path}" if key[0] == "folder"
                       else f"both hold run {key[1][:12]} at update {key[2]}: one is a copy of the other")
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
