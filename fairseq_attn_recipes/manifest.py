"""The run record (``SAVE_DIR/run.json``): what a run *is*, written by the recipe steps and read
by every consumer (``fairseq-attn-results``, ``fairseq-attn-paper``, the seeds grouping), so
that nothing is inferred from a folder name.

Layout (``"format": 1``)::

    {
      "format": 1,
      "run_id": "...",                # made when the run starts; copies of a run share it
      "arch": "transformer_csan1d_wmt_en_de",
      "model": {"csan_window": 3, ...},   # every model flag fairseq resolved (arch defaults included)
      "training": {...},              # optimizer, lr schedule, criterion, task, lr, clip, seed, fp16...
      "batch": {"max_tokens", "update_freq", "world_size", "tokens_per_update_max"},
      "seed": 1,
      "data": {"path", "data_id", "settings", "train_pairs"},   # the data-bin's fingerprint
      "code": {"fairseq_attn_plugins", "git_commit", "git_dirty", "fairseq", "torch", "python"},
      "trainings": [{"max_update", "from_update", "to_update", "world_size", "update_freq",
                     "started", "finished", "code"}],        # one per train.sh that trained
      "checkpoints": {"checkpoint_2_54.pt": {"num_updates": 54, "epoch": 2, ...}, ...},
      "num_updates": 54,              # the newest checkpoint's
      "evaluations": {                # one per subset; test and valid never share a file
        "test": {"dir": "test", "hyp": "test/hyp.txt", "ref": "/abs/test.de", "ref_sha256": "...",
                 "averaged": [{"file": "checkpoint_2_54.pt", "num_updates": 54}, ...],
                 "beam": 4, "lenpen": 0.6,
                 "scores": {"bleu": {"score": 27.3, "signature": "..."},
                            "tokenized_bleu": {"score": 28.1, "method": "..."}}}
      }
    }

``evaluations[subset]["scores"]`` is THE place for metric scores of a subset: a dict keyed by
metric name, each value a dict with at least ``"score"`` (and whatever describes how it was
computed: signature, method, model). A new metric adds a key; consumers look a metric up by name.

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
import subprocess
import sys
import uuid
import warnings
from typing import Dict, List, Optional

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
    path = record_path(run_dir)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(rec, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


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


def resolve_train_args(argv: List[str]):
    """fairseq-train's own resolution of ``argv`` (architecture defaults, --user-dir) without
    training: the config the training will run with."""
    import logging

    logging.disable(logging.WARNING)
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    with warnings.catch_warnings():  # hydra's deprecation notes, printed by every fairseq-train too
        warnings.simplefilter("ignore")
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(parser, input_args=argv)
        cfg = convert_namespace_to_omegaconf(args)
    logging.disable(logging.NOTSET)
    return cfg


def code_version() -> Dict:
    import fairseq
    import torch

    import fairseq_attn_plugins

    pkg = os.path.dirname(os.path.abspath(fairseq_attn_plugins.__file__))
    out = {"fairseq_attn_plugins": getattr(fairseq_attn_plugins, "__version__", None),
           "fairseq": getattr(fairseq, "__version__", None), "torch": torch.__version__,
           "python": sys.version.split()[0], "git_commit": None, "git_dirty": None}
    try:
        commit = subprocess.run(["git", "-C", pkg, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=20)
        if commit.returncode == 0:
            out["git_commit"] = commit.stdout.strip()
            status = subprocess.run(["git", "-C", pkg, "status", "--porcelain", "--", "."],
                                    capture_output=True, text=True, timeout=20)
            out["git_dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return out


# ---------------------------------------------------------------- checkpoints
_CHECKPOINT = re.compile(r"checkpoint(\d+)\.pt|checkpoint_(\d+)_(\d+)\.pt|checkpoint_last\.pt")


def checkpoint_state(path: str) -> Dict:
    """Update number and epoch a checkpoint holds, read from its own state (memory-mapped: the
    tensors are not read)."""
    import torch

    import fairseq_attn_plugins  # noqa: F401  allowlists fairseq's checkpoint classes

    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception as e:  # corrupt, truncated or refused: named, no traceback
        from fairseq_attn_plugins.checkpoint_safety import corrupt_message
        raise RecordError(corrupt_message(path, e)) from None
    hist = state.get("optimizer_history") or [{}]
    it = (state.get("extra_state") or {}).get("train_iterator") or {}
    epoch = it.get("epoch")
    if epoch is not None and epoch > 1 and it.get("iterations_in_epoch") == 0:
        epoch -= 1  # saved at an epoch's end: fairseq stores the next epoch to start
    return {"num_updates": hist[-1].get("num_updates"), "epoch": epoch}


def scan_checkpoints(run_dir: str, known: Optional[Dict] = None) -> Dict[str, Dict]:
    """Every checkpoint of a run (``checkpointE.pt``, ``checkpoint_E_U.pt``, ``checkpoint_last.pt``)
    with the update number read from the file itself; entries of ``known`` whose file is
    unchanged (size and mtime) are reused."""
    known = known or {}
    out = {}
    for name in sorted(os.listdir(run_dir)):
        if not _CHECKPOINT.fullmatch(name):
            continue
        st = os.stat(os.path.join(run_dir, name))
        old = known.get(name)
        if old and old.get("bytes") == st.st_size and old.get("mtime_ns") == st.st_mtime_ns:
            out[name] = old
            continue
        info = checkpoint_state(os.path.join(run_dir, name))
        out[name] = {"num_updates": info["num_updates"], "epoch": info["epoch"],
                     "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
    return out


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


def last_save_points(run_dir: str, n: int, checkpoints: Optional[Dict] = None) -> List[Dict]:
    """The newest ``n`` save points, newest first, the final one included; fewer is an error."""
    points = save_points(checkpoints if checkpoints is not None else scan_checkpoints(run_dir))
    if len(points) < n:
        raise RecordError(
            f"{run_dir}: {len(points)} saved checkpoints (updates {', '.join(str(p['num_updates']) for p in points) or 'none'}) "
            f"but N_AVG={n} are to be averaged; train longer (or keep more with --keep-interval-updates), "
            f"or set N_AVG to at most {len(points)} and report it")
    return list(reversed(points))[:n]


# ---------------------------------------------------------------- training (fairseq_attn_recipes.train)
def _data_record(data_dir: str) -> Dict:
    with open(os.path.join(data_dir, "prepare.json"), encoding="utf-8") as f:
        prep = json.load(f)
    return {"path": os.path.abspath(data_dir), "data_id": prep["data_id"], "settings": prep["settings"],
            "train_pairs": prep["train_pairs"]}


def identity_of_checkpoint(path: str) -> Dict:
    """Identity from the configuration a checkpoint holds (memory-mapped: tensors not read)."""
    import torch

    import fairseq_attn_plugins  # noqa: F401  allowlists fairseq's checkpoint classes
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception as e:  # corrupt, truncated or refused: named, no traceback
        from fairseq_attn_plugins.checkpoint_safety import corrupt_message
        raise RecordError(corrupt_message(path, e)) from None
    if state.get("cfg") is None:
        raise RecordError(f"{path}: the checkpoint holds no configuration (cfg)")
    return identity_of_cfg(state["cfg"])


def _legacy_identity(run_dir: str) -> Optional[Dict]:
    """Identity of a run trained before run records existed: from its checkpoint_last.pt."""
    path = os.path.join(run_dir, "checkpoint_last.pt")
    if not os.path.isfile(path):
        return None
    ident = identity_of_checkpoint(path)
    data_json = os.path.join(run_dir, "data.json")
    if os.path.isfile(data_json):
        with open(data_json, encoding="utf-8") as f:
            d = json.load(f)
        ident["data"] = {"path": d.get("data"), "data_id": d.get("data_id"), "settings": d.get("settings"),
                         "train_pairs": d.get("train_pairs")}
    return ident


def start_run(cfg, write: bool = True) -> bool:
    """Before training: the run ``cfg`` is (fairseq's resolved config) against the run its
    save_dir holds. Returns True to train (a new run, or the same run continued, recorded
    when ``write``), False when the run was trained to ``max_update`` before; raises
    RecordError naming the differences when the folder holds another run."""
    new = identity_of_cfg(cfg)
    run_dir = cfg.checkpoint.save_dir
    data_dir = cfg.task.data
    new["data"] = _data_record(data_dir) if os.path.isfile(os.path.join(data_dir, "prepare.json")) else None
    if os.environ.get("WORLD_SIZE", "").isdigit() and new["batch"]["world_size"] == 1:  # torchrun
        b = new["batch"]
        b["world_size"] = int(os.environ["WORLD_SIZE"])
        b["tokens_per_update_max"] = b["max_tokens"] * b["update_freq"] * b["world_size"] if b["max_tokens"] else None
    os.makedirs(run_dir, exist_ok=True)
    rec = load(run_dir)
    adopted = False
    if rec is None:
        old = _legacy_identity(run_dir)
        if old is not None:  # checkpoints of a run without a record: the same run, or refused
            adopted = True
            rec = dict(old, format=FORMAT, run_id=uuid.uuid4().hex, created=now(), trainings=[],
                       checkpoints={}, evaluations={}, num_updates=None)
            rec.pop("max_update", None)
    if rec is not None:
        diff = differences(rec, new)
        if diff:
            raise RecordError(
                f"{run_dir} holds another run than the one asked for:\n  " + "\n  ".join(diff) +
                "\nresuming it would train its weights under other settings. Give this run its own "
                "folder (SAVE_DIR=<new folder>), or run with the recorded settings to continue it.")
    else:
        rec = {"format": FORMAT, "run_id": uuid.uuid4().hex, "created": now(), "trainings": [],
               "checkpoints": {}, "evaluations": {}, "num_updates": None}
    rec.update({k: new[k] for k in ("arch", "model", "training", "seed", "batch")})
    rec["data"] = new["data"] or rec.get("data")
    rec["checkpoints"] = scan_checkpoints(run_dir, rec.get("checkpoints"))
    points = save_points(rec["checkpoints"])
    done = points[-1]["num_updates"] if points else 0
    rec["num_updates"] = done if points else None
    max_update = new["max_update"]
    if done and max_update and done >= max_update:
        if write:
            save(run_dir, rec)
        if done > max_update:
            raise RecordError(f"{run_dir} was trained to {done} updates, more than --max-update {max_update}: "
                              f"evaluate it as it is, or give another SAVE_DIR for a shorter run")
        return False
    if write:
        rec["code"] = code_version()
        rec["trainings"].append({"max_update": max_update, "from_update": done, "to_update": None,
                                 "world_size": new["batch"]["world_size"], "update_freq": new["batch"]["update_freq"],
                                 "started": now(), "finished": None, "code": rec["code"],
                                 "adopted_from_checkpoints": adopted or None})
        save(run_dir, rec)
    return True


def finish_run(run_dir: str) -> Dict:
    """After training: the checkpoints it saved, with the update number each one holds."""
    rec = load(run_dir)
    if rec is None:
        raise RecordError(f"{run_dir}: no run record (run.json); it is written before training")
    rec["checkpoints"] = scan_checkpoints(run_dir, rec.get("checkpoints"))
    points = save_points(rec["checkpoints"])
    rec["num_updates"] = points[-1]["num_updates"] if points else None
    if rec["trainings"]:
        rec["trainings"][-1].update(to_update=rec["num_updates"], finished=now())
    save(run_dir, rec)
    return rec
