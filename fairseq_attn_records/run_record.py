"""The run record (``SAVE_DIR/run.json``): what a run *is*, written by the recipe steps and read
by every consumer (``fairseq-attn-results``, ``fairseq-attn-paper``, the seeds grouping, the
demo), so that nothing is inferred from a folder name.

This module is the record itself, without torch or fairseq: its layout, reading and writing,
identity and differences, save points, the evaluation of a subset. What needs fairseq (resolving
fairseq-train's arguments, reading checkpoints, the record kept around a training) is
:mod:`fairseq_attn_recipes.recording`.

Layout (``"format": 1``)::

    {
      "format": 1,
      "run_id": "...",                # made when the run starts; copies of a run share it, and a copy
                                      # (or a moved run) trained further in its folder gets its own
      "run_dir": "/abs/folder",       # the folder it was trained in (where a training last started)
      "continued_from": {"run_id", "run_dir", "num_updates"},  # only then: the run it continues
      "arch": "transformer_csan1d_wmt_en_de",
      "model": {"csan_window": 3, ...},   # every model flag fairseq resolved (arch defaults included)
      "training": {...},              # optimizer, lr schedule, criterion, task, lr, clip, seed, fp16...
      "batch": {"max_tokens", "update_freq", "world_size", "tokens_per_update_max"},
      "seed": 1,
      "data": {"path", "data_id", "settings", "train_pairs"},   # the data-bin's fingerprint
      "code": {"fairseq_attn_plugins", "git_commit", "git_dirty", "fairseq", "torch", "python"},
      "trainings": [{"max_update", "from_update", "to_update", "world_size", "update_freq",
                     "started", "finished", "code", "argv",
                     "cpu_threads"}],  # one per train.sh that trained; cpu_threads None on GPUs
      "checkpoints": {"checkpoint_2_54.pt": {"num_updates": 54, "epoch": 2, ...}, ...},
      "num_updates": 54,              # the newest checkpoint's
      "tuned_paths": {"cuda|float16|t5bias buckets h8d64|train|L64": "fused", ...},  # only with
                                      # --attn-backend tuned: the path of each shape class (a
                                      # resumed run keeps them; SAVE_DIR/tuned_paths.json while it trains)
      "evaluations": {                # one per subset; test and valid never share a file
        "test": {"dir": "test", "hyp": "test/hyp.txt", "hyp_sha256": "...",  # what was scored
                 "ref": "/abs/test.de", "ref_sha256": "...",
                 "checkpoints_mtime_ns": ...,  # the newest checkpoint file when it was evaluated
                 "averaged": [{"file": "checkpoint_2_54.pt", "num_updates": 54}, ...],
                 "beam": 4, "lenpen": 0.6,
                 "evaluated_with": {"settings": {"GEN_ARGS", "BEAM", "LENPEN", "N_AVG", ...},
                                    "inputs": {source, reference, prepare.json: sha256},
                                    "checkpoints": [{"file", "num_updates", "bytes", "mtime_ns"}]},
                 "scores": {"bleu": {"score": 27.3, "signature": "...", "full": "..."},
                            "chrf": {...}, "comet": {"score", "signature", "segments"},
                            "tokenized_bleu": {"score": 28.1, "method": "...", "full": "..."}}}
      }
    }

``evaluations[subset]["scores"]`` is THE place for metric scores of a subset: a dict keyed by
metric name (the keys of the metric registry, :mod:`fairseq_attn_records.metrics`, plus
``tokenized_bleu``), each value a dict with at least ``"score"`` (and whatever describes how it
was computed: signature, method, segments). The evaluation step writes the same dict to
``SUBSET/scores.json`` (:func:`record_evaluation`). A new metric adds a key; consumers look a
metric up by name.

Identity (:func:`identity`, compared by :func:`differences`): ``arch``, ``model``, ``training``,
the effective batch (``tokens_per_update_max``) and the data-bin (``data_id``). Not identity:
``max_update`` (a longer run continues the same run and is recorded in ``trainings``), how the
batch is split between workers and accumulation (``world_size`` × ``update_freq`` at the same
product), save/log intervals, paths, the attention kernel (``--attn-backend``).
"""

import datetime
import hashlib
import json
import os
import re
from typing import Dict, List, Optional

from .output_files import replace_folder, write_json

RECORD = "run.json"
FORMAT = 1

# keys of fairseq's legacy model namespace that are not model flags: registry choices held in
# their own sections, memory/computation switches that leave the model unchanged, bookkeeping
NOT_MODEL = {"bpe", "criterion", "optimizer", "lr_scheduler", "scoring", "task", "tokenizer",
             "checkpoint_activations", "offload_activations", "attn_backend", "attn_explicit_flags",
             "_name"}
# task settings that change what is trained (the data path and languages: the data-bin's fingerprint)
TASK_KEYS = ("_name", "load_alignments", "left_pad_source", "left_pad_target", "max_source_positions",
             "max_target_positions", "upsample_primary", "truncate_source", "train_subset",
             "required_seq_len_multiple")
TRAINING_KEYS = {"optimization": ("lr", "clip_norm", "sentence_avg"),
                 "dataset": ("max_tokens", "batch_size", "required_batch_size_multiple"),
                 "common": ("seed", "fp16", "bf16", "amp", "memory_efficient_fp16", "memory_efficient_bf16")}
WHOLE_SECTIONS = ("optimizer", "lr_scheduler", "criterion")


class RecordError(ValueError):
    pass


# ---------------------------------------------------------------- reading and writing
def record_path(run_dir: str) -> str:
    return os.path.join(run_dir, RECORD)


def load(run_dir: str) -> Optional[Dict]:
    """The run record of ``run_dir``, or None when it has none; a broken one is an error."""
    path = record_path(run_dir)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise RecordError(f"{path}: unreadable run record ({e})") from None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        raise RecordError(f"{path}: not a run record of format {FORMAT}")
    return rec


def save(run_dir: str, rec: Dict) -> None:
    write_json(record_path(run_dir), rec, indent=2, sort_keys=True, end="\n")


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------- identity
def _plain(value):
    """JSON-safe copy (tuples -> lists, omegaconf containers -> plain, others -> str)."""
    if type(value).__name__ in ("DictConfig", "ListConfig"):
        from omegaconf import OmegaConf
        value = OmegaConf.to_container(value, resolve=True, enum_to_str=True)
    return json.loads(json.dumps(value, default=str))


def _items(node) -> Dict:
    if node is None:
        return {}
    if isinstance(node, dict):
        return dict(node)
    if hasattr(node, "keys") and hasattr(node, "__getitem__"):  # DictConfig
        return {k: node[k] for k in node.keys()}
    return dict(vars(node))  # argparse.Namespace (fairseq's legacy model config)


def identity_of_cfg(cfg) -> Dict:
    """Identity (see the module docstring) of a fairseq config: the one fairseq-train resolves
    from its arguments, or the one a checkpoint holds (``state["cfg"]``)."""
    sections = {k: _items(v) for k, v in _items(cfg).items()
                if v is not None and not isinstance(v, (str, int, float, bool, list))}
    model = sections.get("model", {})
    elsewhere = set()
    for name, items in sections.items():
        if name != "model":
            elsewhere |= set(items)
    model_flags = {k: _plain(v) for k, v in sorted(model.items())
                   if k not in elsewhere and k not in NOT_MODEL}
    arch = model.get("arch") or model.get("_name")
    training = {name: {k: _plain(v) for k, v in sorted(sections.get(name, {}).items())}
                for name in WHOLE_SECTIONS}
    training["task"] = {k: _plain(sections.get("task", {}).get(k)) for k in TASK_KEYS}
    for name, keys in TRAINING_KEYS.items():
        for k in keys:
            training[k] = _plain(sections.get(name, {}).get(k))
    if isinstance(training["lr"], list) and len(training["lr"]) == 1:
        training["lr"] = training["lr"][0]
    uf = _plain(sections.get("optimization", {}).get("update_freq"))
    uf = uf[0] if isinstance(uf, list) else uf
    ws = _plain(sections.get("distributed_training", {}).get("distributed_world_size"))
    mt = training["max_tokens"]
    batch = {"max_tokens": mt, "update_freq": uf, "world_size": ws,
             "tokens_per_update_max": mt * uf * ws if None not in (mt, uf, ws) else None}
    if model_flags.get("share_all_embeddings"):  # as fairseq's build_model sets it (and so a checkpoint holds it)
        model_flags["share_decoder_input_output_embed"] = True
    model_flags["arch"] = arch
    return {"arch": arch, "model": model_flags, "training": training, "batch": batch,
            "seed": training["seed"],
            "max_update": _plain(sections.get("optimization", {}).get("max_update"))}


def differences(old: Dict, new: Dict, labels=("recorded", "now")) -> List[str]:
    """What makes ``new`` another run than ``old`` (both identities or records), one line each
    (``labels``: how the two sides are named)."""
    out = []
    lo, ln = labels

    def cmp(prefix, a, b):
        for k in sorted(set(a) | set(b)):
            va, vb = a.get(k, "(absent)"), b.get(k, "(absent)")
            if va != vb:
                out.append(f"{prefix}{k}: {va!r} {lo}, {vb!r} {ln}")

    cmp("", {"arch": old.get("arch")}, {"arch": new.get("arch")})
    cmp("", {k: v for k, v in old.get("model", {}).items() if k != "arch"},
        {k: v for k, v in new.get("model", {}).items() if k != "arch"})
    for k in sorted(set(old.get("training", {})) | set(new.get("training", {}))):
        a, b = old.get("training", {}).get(k), new.get("training", {}).get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            cmp(f"{k}.", a, b)
        elif a != b:
            out.append(f"{k}: {a!r} {lo}, {b!r} {ln}")
    a = old.get("batch", {}).get("tokens_per_update_max")
    b = new.get("batch", {}).get("tokens_per_update_max")
    if a != b:
        ob, nb = old.get("batch", {}), new.get("batch", {})
        out.append(f"effective batch (max_tokens x update_freq x world_size): {a} "
                   f"({ob.get('max_tokens')} x {ob.get('update_freq')} x {ob.get('world_size')}) {lo}, "
                   f"{b} ({nb.get('max_tokens')} x {nb.get('update_freq')} x {nb.get('world_size')}) {ln}")
    a, b = (old.get("data") or {}).get("data_id"), (new.get("data") or {}).get("data_id")
    if a and b and a != b:
        out.append(f"data-bin: {(old.get('data') or {}).get('path')} (data_id {a[:12]}) {lo}, "
                   f"{(new.get('data') or {}).get('path')} (data_id {b[:12]}) {ln}")
    return out


# ---------------------------------------------------------------- save points
CHECKPOINT_NAME = re.compile(r"checkpoint(\d+)\.pt|checkpoint_(\d+)_(\d+)\.pt|checkpoint_last\.pt")


def newest_checkpoint(run_dir: str) -> Optional[Dict]:
    """``{"file", "mtime_ns"}`` of the run's most recently written checkpoint (``checkpointE.pt``,
    ``checkpoint_E_U.pt``, ``checkpoint_last.pt``; not an average), or None."""
    best = None
    for name in os.listdir(run_dir):
        if CHECKPOINT_NAME.fullmatch(name):
            m = os.stat(os.path.join(run_dir, name)).st_mtime_ns
            if best is None or m > best["mtime_ns"]:
                best = {"file": name, "mtime_ns": m}
    return best



def save_points(checkpoints: Dict[str, Dict]) -> List[Dict]:
    """One entry per update number saved (a named checkpoint preferred over checkpoint_last.pt,
    which counts only for an update no other file holds: the final one of a run that stopped
    between save points), oldest first."""
    by_update: Dict[int, str] = {}
    for name, info in checkpoints.items():
        u = info.get("num_updates")
        if u is None:
            continue
        if u not in by_update or by_update[u] == "checkpoint_last.pt":
            by_update[u] = name
    return [{"file": by_update[u], "num_updates": u, "epoch": checkpoints[by_update[u]].get("epoch")}
            for u in sorted(by_update)]


# ---------------------------------------------------------------- trainings
# arguments that differ between the processes or launches of one training, not the training
_LAUNCH_ONLY = {"--distributed-rank", "--distributed-init-method", "--distributed-port", "--device-id"}
# arguments that only choose which checkpoint files a training keeps, not what it trains (a learning curve
# made finer after the fact, lengths.sh's CURVE, changes --keep-interval-updates-pattern)
_FILES_KEPT = {"--keep-interval-updates", "--keep-interval-updates-pattern", "--keep-last-epochs",
               "--keep-best-checkpoints"}


def _without(argv: List[str], flags) -> List[str]:
    """``argv`` without ``flags`` and their values (``--flag value`` or ``--flag=value``)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in flags:
            skip = True
            continue
        if a.split("=", 1)[0] in flags:
            continue
        out.append(a)
    return out


def launch_key(argv: List[str]) -> List[str]:
    """fairseq-train's arguments without those that only say how this process was launched (what a
    run record keeps of each training)."""
    return _without(argv, _LAUNCH_ONLY)


# arguments that say where the run and its logs lie, not what it trains: a run copied or moved is the
# run its record (in its folder) says (fairseq-train's first argument, the data folder, likewise: by data_id)
_PLACE = {"--save-dir", "--tensorboard-logdir"}


def same_training(recorded: Optional[List[str]], argv: List[str], elsewhere: bool = False) -> bool:
    """A training recorded with ``recorded`` (its :func:`launch_key`) and one launched with ``argv`` train
    the same: equal but for how they were launched and which checkpoint files they keep (``elsewhere``:
    and for where the run, its logs and its data folder, the first argument, lie)."""
    ignored = _LAUNCH_ONLY | _FILES_KEPT | (_PLACE if elsewhere else set())
    if recorded is None:
        return False
    a, b = _without(recorded, ignored), _without(argv, ignored)
    return a[1:] == b[1:] if elsewhere else a == b


def finished_before(run_dir: str, argv: List[str]) -> bool:
    """True when the run's last training finished with these arguments (:func:`same_training`) at its
    ``--max-update``, or stopped there by fairseq's ``--patience`` (nothing to do: no process is started). Anything else, a changed argument
    included, is decided by :func:`start_run` on fairseq's resolution."""
    try:
        rec = load(run_dir)
    except RecordError:
        return False
    last = ((rec or {}).get("trainings") or [{}])[-1]
    return bool(last.get("finished") and same_training(last.get("argv"), argv) and trained_to_its_end(rec))


def trained_to_its_end(rec: Dict) -> bool:
    """The record's last training reached its ``--max-update``, or fairseq's ``--patience`` stopped it at
    its last checkpoint."""
    last = (rec.get("trainings") or [{}])[-1]
    if last.get("stopped") == "patience":  # stopped by fairseq's --patience at its last checkpoint
        return last.get("to_update") == rec.get("num_updates")
    return bool(last.get("max_update") and (rec.get("num_updates") or 0) >= last["max_update"])


def trained_patiences(rec: Dict) -> List[int]:
    """The ``--patience`` values the run's trainings were started with, in increasing order."""
    return sorted({int(a[i + 1]) for a in (t.get("argv") or [] for t in rec.get("trainings") or [])
                   for i in range(len(a) - 1) if a[i] == "--patience" and a[i + 1].isdigit()})


def training_time(rec: Dict) -> Dict:
    """The wall-clock time of a run's trainings, from its record: ``{"seconds", "trainings", "cut"}``.

    A finished training counts from its start to its finish. A training killed part-way (no
    ``finished``; also the one running now) counts until the newest checkpoint the record lists
    that was written after it started and before the next training started: the work after that
    checkpoint was lost and redone. ``cut`` counts them; one killed before it saved anything adds
    nothing. Wall time, on a machine shared or not: speeds belong in a benchmark run alone."""
    trainings = rec.get("trainings") or []
    marks = sorted(info["mtime_ns"] / 1e9 for info in (rec.get("checkpoints") or {}).values()
                   if info.get("mtime_ns") is not None)
    starts = [datetime.datetime.fromisoformat(t["started"]).timestamp() for t in trainings]
    seconds, cut = 0.0, 0
    for i, t in enumerate(trainings):
        if t.get("finished"):
            seconds += datetime.datetime.fromisoformat(t["finished"]).timestamp() - starts[i]
            continue
        cut += 1
        until = starts[i + 1] if i + 1 < len(starts) else float("inf")
        saved = [m for m in marks if starts[i] <= m < until]
        seconds += max(saved) - starts[i] if saved else 0.0
    return {"seconds": seconds, "trainings": len(trainings), "cut": cut}


# ---------------------------------------------------------------- evaluations
def record_evaluation(run_dir: str, evaluation: Dict) -> Dict:
    """Store the evaluation of one subset (``evaluation["subset"]``) in the run record of
    ``run_dir``: its outputs relative to the run, the hypotheses' sha256 (what was scored), the
    reference (path and sha256), the checkpoints averaged (by update), the newest checkpoint's
    time when they were read (``checkpoints_mtime_ns``: a later checkpoint makes the evaluation
    stale) and the scores keyed by metric name, as ``scores.json`` holds them. Returns the entry
    recorded."""
    rec = load(run_dir)
    if rec is None:
        raise RecordError(f"{run_dir}: no run record (run.json): train the run with train.sh first (it "
                          f"records a run it finds without one)")
    entry = evaluation_entry(run_dir, evaluation)
    rec.setdefault("evaluations", {})[evaluation["subset"]] = entry
    save(run_dir, rec)
    return entry


def evaluation_entry(run_dir: str, evaluation: Dict) -> Dict:
    """The run record's entry for ``evaluation`` (see :func:`record_evaluation`)."""
    run_real = os.path.realpath(run_dir)
    rel = lambda path: os.path.relpath(os.path.realpath(path), run_real)
    averaged = evaluation.get("averaged") or []
    mtime = evaluation.get("checkpoints_mtime_ns")
    if mtime is None:
        newest = newest_checkpoint(run_dir)
        mtime = newest["mtime_ns"] if newest else None
    return {
        "dir": rel(os.path.dirname(evaluation["hyp"])), "hyp": rel(evaluation["hyp"]),
        "hyp_sha256": evaluation.get("hyp_sha256") or file_sha256(evaluation["hyp"]), "ref": evaluation["ref"],
        "ref_sha256": file_sha256(evaluation["ref"]), "averaged": averaged,
        "num_updates": max((a["num_updates"] for a in averaged), default=None),
        "checkpoints_mtime_ns": mtime,
        "beam": evaluation.get("beam"), "lenpen": evaluation.get("lenpen"),
        "evaluated_with": evaluation.get("evaluated_with"), "scores": evaluation["scores"],
        "evaluated": now(),
    }


def publish_evaluation(staged: str, final: str, run_dir: Optional[str], evaluation: Dict) -> None:
    """Move a finished evaluation's folder ``staged`` (hypotheses, scores.json, averaged.json...,
    written aside) to ``final`` in one rename, then record it in the run record. An older
    ``final`` is moved aside first and deleted after; a stop in between leaves either no
    ``final`` (missing outputs, refused by the consumers) or outputs whose hypotheses the run
    record did not score (their sha256 differs, refused by the consumers), never a mix read as
    one evaluation."""
    replace_folder(staged, final)
    if run_dir:
        record_evaluation(run_dir, evaluation)


def check_evaluation(run_dir: str, subset: str, evaluation: Dict) -> str:
    """The hypothesis file of the recorded ``evaluation`` of ``subset``, checked to be the one it
    scored (sha256); RecordError naming both otherwise (an evaluation stopped before it was
    recorded, or a file changed since)."""
    hyp = os.path.join(run_dir, evaluation["hyp"])
    want = evaluation.get("hyp_sha256")
    if not os.path.isfile(hyp):
        raise RecordError(f"{hyp} is missing, but {record_path(run_dir)} records an evaluation of {subset} "
                          f"in it (an evaluation stopped half-way?): re-run evaluate.sh (EVAL_SUBSET={subset})")
    if not want:
        raise RecordError(f"{record_path(run_dir)}: the evaluation of {subset} does not name the hypotheses "
                          f"it scored (recorded before evaluations did): re-run evaluate.sh (EVAL_SUBSET={subset})")
    got = file_sha256(hyp)
    if got != want:
        raise RecordError(f"{hyp} (sha256 {got[:12]}) is not the file {record_path(run_dir)} scored for {subset} "
                          f"(sha256 {want[:12]}): an evaluation stopped before it was recorded, or the file "
                          f"changed; re-run evaluate.sh (EVAL_SUBSET={subset})")
    return hyp


def _copied(run_dir: str, rec: Dict, then: int) -> bool:
    """Every checkpoint of the folder is newer than ``then`` and one the record lists, of the size
    it lists: the run folder copied (``cp -r`` gives every file a new time), not trained on (a
    training writes new save points and leaves the older ones as they were)."""
    listed = rec.get("checkpoints") or {}
    names = [n for n in os.listdir(run_dir) if CHECKPOINT_NAME.fullmatch(n)]
    for name in names:
        st = os.stat(os.path.join(run_dir, name))
        if st.st_mtime_ns <= then or (listed.get(name) or {}).get("bytes") != st.st_size:
            return False
    return bool(names)


def stale_evaluation(run_dir: str, rec: Dict, evaluation: Dict) -> Optional[str]:
    """Why ``evaluation`` is older than the run's newest checkpoint (a later checkpoint file, or
    a newer update count in the record), or None."""
    newest = newest_checkpoint(run_dir)
    then = evaluation.get("checkpoints_mtime_ns")
    if newest and then is not None and newest["mtime_ns"] > then and not _copied(run_dir, rec, then):
        return f"{newest['file']} was written after the evaluation"
    done, evaluated = rec.get("num_updates"), evaluation.get("num_updates")
    if done is not None and evaluated is not None and done > evaluated:
        return f"trained to update {done}, evaluated at update {evaluated}"
    return None
