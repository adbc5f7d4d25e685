"""The run record kept around a training (``python -m fairseq_attn_recipes.train``): fairseq's
resolution of fairseq-train's arguments, the checkpoints a run saved (update numbers read from the
files), and the record started before training and finished after it. The record itself (layout,
identity, differences, evaluations) is :mod:`fairseq_attn_records.run_record`, torch-free; this
module needs fairseq and torch and imports the plugin (its checkpoint allowlist) where it reads
a checkpoint (:mod:`fairseq_attn_plugins.checkpoint_identity`)."""

import argparse
import json
import os
import subprocess
import sys
import uuid
import warnings
from typing import Dict, List, Optional

from fairseq_attn_records import checkpoint_config
from fairseq_attn_records.fairseq_import import import_fairseq
from fairseq_attn_records.run_record import (CHECKPOINT_NAME, FORMAT, RecordError, differences, identity_of_cfg, launch_key, load,
                                             now, record_path, same_training, save, save_points, trained_patiences,
                                             trained_to_its_end)


def resolve_train_args(argv: List[str]):
    """fairseq-train's own resolution of ``argv`` (architecture defaults, --user-dir) without
    training: the config the training will run with. The training step's first import of
    fairseq: without scikit-learn and scipy.stats, which training never calls."""
    import logging

    logging.disable(logging.WARNING)  # fairseq's import-time notices too
    import_fairseq()
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    with warnings.catch_warnings():  # hydra's deprecation notes, printed by every fairseq-train too
        warnings.simplefilter("ignore")
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(parser, input_args=argv)
        cfg = convert_namespace_to_omegaconf(args)
    logging.disable(logging.NOTSET)
    # the plugin (--user-dir) was imported inside catch_warnings, which put the warning filters
    # back as they were: its filters of known-harmless warnings again (the same entries)
    from fairseq_attn_plugins.integration import quiet_imports

    quiet_imports.install()
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


def scan_checkpoints(run_dir: str, known: Optional[Dict] = None) -> Dict[str, Dict]:
    """Every checkpoint of a run (``checkpointE.pt``, ``checkpoint_E_U.pt``, ``checkpoint_last.pt``)
    with the update number read from the file itself (:func:`_saved_at`: no torch for a plain
    fairseq state); entries of ``known`` whose file is unchanged (size and mtime) are reused."""
    known = known or {}
    out = {}
    for name in sorted(os.listdir(run_dir)):
        if not CHECKPOINT_NAME.fullmatch(name):
            continue
        st = os.stat(os.path.join(run_dir, name))
        old = known.get(name)
        if old and old.get("bytes") == st.st_size and old.get("mtime_ns") == st.st_mtime_ns:
            out[name] = old
            continue
        info = _saved_at(os.path.join(run_dir, name))
        out[name] = {"num_updates": info["num_updates"], "epoch": info["epoch"],
                     "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
    return out


def _saved_at(path: str) -> Dict:
    """Update number and epoch of a checkpoint: read without torch where its state is plain
    (:mod:`fairseq_attn_records.checkpoint_config`), else by the plugin (its answer or its one-line error)."""
    state = checkpoint_config.state_without_tensors(path)
    if state is not None and state.get("optimizer_history"):
        return checkpoint_config.saved_at(state)
    from fairseq_attn_plugins.checkpoint_identity import checkpoint_state  # torch

    return checkpoint_state(path)


class NoSavePoint(RecordError):
    """The run holds no checkpoint of the update asked for (never reached, or not kept)."""


def updates_listed(points: List[Dict], shown: int = 3) -> str:
    """The updates of save points in a line: all of a few, else the count, the first and the last
    ``shown`` (a long run's list is hundreds of numbers: the line a study logs per curve point)."""
    updates = [str(p["num_updates"]) for p in points]
    if len(updates) <= 2 * shown + 1:
        return f"updates {', '.join(updates)}" if updates else "none"
    return f"{len(updates)} save points, updates {', '.join(updates[:shown])} ... {', '.join(updates[-shown:])}"


def last_save_points(run_dir: str, n: int, checkpoints: Optional[Dict] = None,
                     at_update: Optional[int] = None) -> List[Dict]:
    """The newest ``n`` save points, newest first, the final one included; fewer is an error.
    ``at_update``: those up to the save point of that update (a learning curve's point), which must
    exist (:class:`NoSavePoint` otherwise)."""
    points = save_points(checkpoints if checkpoints is not None else scan_checkpoints(run_dir))
    if at_update is not None:
        if not any(p["num_updates"] == at_update for p in points):
            raise NoSavePoint(
                f"{run_dir}: no checkpoint of update {at_update} (saved: {updates_listed(points)}): the run stopped "
                f"before it, or it "
                f"was pruned (kept only with lengths.sh's CURVE, --keep-interval-updates-pattern)")
        points = [p for p in points if p["num_updates"] <= at_update]
    if len(points) < n:
        raise RecordError(
            f"{run_dir}: {len(points)} saved checkpoints ({updates_listed(points)}) "
            f"but N_AVG={n} are to be averaged; train longer (or keep more with --keep-interval-updates), "
            f"or set N_AVG to at most {len(points)} and report it")
    return list(reversed(points))[:n]


# ---------------------------------------------------------------- training
def _data_record(data_dir: str) -> Dict:
    with open(os.path.join(data_dir, "prepare.json"), encoding="utf-8") as f:
        prep = json.load(f)
    return {"path": os.path.realpath(data_dir), "data_id": prep["data_id"], "settings": prep["settings"],
            "train_pairs": prep["train_pairs"], "inputs": prep.get("inputs")}


def _legacy_identity(run_dir: str) -> Optional[Dict]:
    """Identity of a run trained before run records existed: from its checkpoint_last.pt."""
    path = os.path.join(run_dir, "checkpoint_last.pt")
    if not os.path.isfile(path):
        return None
    from fairseq_attn_plugins.checkpoint_identity import identity_of_checkpoint  # torch

    ident = identity_of_checkpoint(path)
    data_json = os.path.join(run_dir, "data.json")
    if os.path.isfile(data_json):
        with open(data_json, encoding="utf-8") as f:
            d = json.load(f)
        ident["data"] = {"path": d.get("data"), "data_id": d.get("data_id"), "settings": d.get("settings"),
                         "train_pairs": d.get("train_pairs")}
    return ident


def check_model_flags(cfg) -> None:
    """The model's own checks of its flags (architecture, pieces, their values, the backend) on
    fairseq's resolution of them, before anything is written: a refused flag leaves no record
    that would block its correction. RecordError with the model's one-line message."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_attn_core.settings import PieceConfigError
    from fairseq_attn_plugins.models import is_attn_arch

    arch = vars(cfg.model).get("arch") if isinstance(cfg.model, argparse.Namespace) else None
    if not is_attn_arch(arch):
        return  # fairseq's own models: checked when fairseq builds them

    from fairseq_attn_core import backends

    try:
        ARCH_MODEL_REGISTRY[arch].check_args(cfg.model)
        # training on CPU with --attn-backend flex or triton: refused here, before the record is written
        backends.check_training_device(vars(cfg.model).get("attn_backend") or "auto", trains_on_cpu(cfg))
    except PieceConfigError as e:
        raise RecordError(str(e)) from None


def never_trained(run_dir: str, rec: Dict) -> bool:
    """A record whose run saved no checkpoint and finished no training (a start refused or killed
    before its first save): no run yet, replaced by the next start rather than compared with it."""
    saved = any(CHECKPOINT_NAME.fullmatch(name) for name in os.listdir(run_dir))
    return not saved and not any(t.get("finished") for t in rec.get("trainings") or [])


def trains_on_cpu(cfg) -> bool:
    """fairseq trains on the CPU with --cpu, or where torch sees no GPU."""
    import torch
    return bool(cfg.common.cpu) or not torch.cuda.is_available()


def cpu_threads(cfg) -> Optional[int]:
    """The threads a CPU training computes with (torch's, from OMP_NUM_THREADS that train.sh sets from
    CPU_THREADS); None on GPUs. On CPU the thread count changes the order of floating-point sums, so the
    same seed with other threads is another, equally valid, model: the record says which."""
    import torch
    return torch.get_num_threads() if trains_on_cpu(cfg) else None


def stopped_early(rec: Dict, argv: Optional[List[str]]) -> bool:
    """The run's last training ended by fairseq's --patience, at its last checkpoint, and was
    started with these arguments (:func:`same_training`): trained to convergence before (resuming it would wait
    ``patience`` more validations from a counter fairseq does not save)."""
    last = (rec.get("trainings") or [{}])[-1]
    return bool(argv is not None and last.get("stopped") == "patience" and last.get("finished")
                and same_training(last.get("argv"), argv) and last.get("to_update") == rec.get("num_updates"))


def trained_in(rec: Dict) -> Optional[str]:
    """The folder a record's run was trained in: its ``run_dir``, else (a record of an older
    train.sh) the absolute ``--save-dir`` of its last training; None where neither says."""
    if rec.get("run_dir"):
        return rec["run_dir"]
    for t in reversed(rec.get("trainings") or []):
        argv = list(t.get("argv") or [])
        for i, a in enumerate(argv):
            value = argv[i + 1] if a == "--save-dir" and i + 1 < len(argv) else \
                a.split("=", 1)[1] if a.startswith("--save-dir=") else None
            if value is not None:
                return os.path.realpath(value) if os.path.isabs(value) else None
    return None


def finished_at_a_new_place(run_dir: str, argv: List[str]) -> bool:
    """A run copied or moved (``run_dir`` holds its record) and asked again for the training it finished:
    :func:`finished_before` but for where the run, its logs and its data lie (``argv[0]``, a data folder
    of the record's data_id) and its checkpoint files those the record lists (else False: the training
    step reads them). The record then takes the new place as the training step's skip (:func:`start_run`)
    would have it: its data folder and these arguments, so that the next ask matches them exactly. No torch."""
    try:
        rec = load(run_dir)
    except RecordError:
        return False
    last = ((rec or {}).get("trainings") or [{}])[-1]
    if not (last.get("finished") and same_training(last.get("argv"), argv, elsewhere=True) and trained_to_its_end(rec)):
        return False
    data = argv[0] if argv else ""
    if not os.path.isfile(os.path.join(data, "prepare.json")):
        return False
    new_data = _data_record(data)
    if new_data["data_id"] != (rec.get("data") or {}).get("data_id"):
        return False
    if not checkpoints_as_listed(run_dir, rec.get("checkpoints") or {}):
        return False
    rec["data"] = new_data
    rec["run_dir"] = trained_in(rec) or os.path.realpath(run_dir)  # before argv names this folder
    last["argv"] = launch_key(argv)
    save(run_dir, rec)
    return True


def checkpoints_as_listed(run_dir: str, listed: Dict[str, Dict]) -> bool:
    """The run's checkpoint files are those ``listed`` (a record's ``checkpoints``), each of its size and
    time: :func:`scan_checkpoints` would read none of them (no torch)."""
    held = {name: os.stat(os.path.join(run_dir, name)) for name in os.listdir(run_dir) if CHECKPOINT_NAME.fullmatch(name)}
    return set(held) == set(listed) and all(
        (listed[n].get("bytes"), listed[n].get("mtime_ns")) == (st.st_size, st.st_mtime_ns) for n, st in held.items())


def continued_elsewhere(run_dir: str, rec: Dict, done: int) -> Optional[Dict]:
    """A run trained in another folder (a copy of it, or the run moved) about to be trained further
    here: ``{"run_id", "run_dir", "num_updates"}`` of the run it continues, which it no longer is
    (its checkpoints will differ from that run's); None when it was trained here (or nothing was)."""
    home, here = trained_in(rec), os.path.realpath(run_dir)
    if not done or not home or home == here:
        return None
    return {"run_id": rec.get("run_id"), "run_dir": home, "num_updates": done}


def start_run(cfg, write: bool = True, argv: Optional[List[str]] = None) -> bool:
    """Before training: the run ``cfg`` is (fairseq's resolved config) against the run its
    save_dir holds. Returns True to train (a new run, or the same run continued, recorded
    when ``write``), False when the run was trained to ``max_update`` before; raises
    RecordError naming the differences when the folder holds another run, or the model's flags
    are refused (checked before anything is written)."""
    check_model_flags(cfg)
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
        if diff and not adopted and never_trained(run_dir, rec):
            if write:
                print(f"{record_path(run_dir)} recorded a start that saved no checkpoint and finished no training "
                      f"({'; '.join(diff)}): replaced by this run", file=sys.stderr)
            rec, diff = None, []
        if diff:
            raise RecordError(
                f"{run_dir} holds another run than the one asked for:\n  " + "\n  ".join(diff) +
                "\nresuming it would train its weights under other settings. Give this run its own "
                "folder (SAVE_DIR=<new folder>), or run with the recorded settings to continue it.")
    if rec is None:
        rec = {"format": FORMAT, "run_id": uuid.uuid4().hex, "created": now(), "trainings": [],
               "checkpoints": {}, "evaluations": {}, "num_updates": None}
    rec.update({k: new[k] for k in ("arch", "model", "training", "seed", "batch")})
    rec["data"] = new["data"] or rec.get("data")
    rec["checkpoints"] = scan_checkpoints(run_dir, rec.get("checkpoints"))
    points = save_points(rec["checkpoints"])
    done = points[-1]["num_updates"] if points else 0
    rec["num_updates"] = done if points else None
    max_update = new["max_update"]
    stop = patience_stop_before(run_dir, cfg.checkpoint.patience, done)
    if stop is not None and stop < done:
        raise RecordError(past_stop_message(run_dir, rec, cfg.checkpoint.patience, stop, done))
    if done and (stopped_early(rec, argv) or stop == done or (max_update and done >= max_update)):
        if write:
            rec["run_dir"] = trained_in(rec) or os.path.realpath(run_dir)  # before argv names this folder
            if argv is not None and rec["trainings"]:  # these arguments: skipped without a start next time
                rec["trainings"][-1]["argv"] = launch_key(argv)
            save(run_dir, rec)
        if max_update and done > max_update:
            raise RecordError(f"{run_dir} was trained to {done} updates, more than --max-update {max_update}: "
                              f"evaluate it as it is, or give another SAVE_DIR for a shorter run")
        return False
    if write:
        keep_tuned_paths(run_dir, rec, continued=done > 0)
        # trained further in another folder than its own (a copy, or moved): a run of its own
        parent = continued_elsewhere(run_dir, rec, done)
        if parent:
            rec.update(run_id=uuid.uuid4().hex, continued_from=parent)
            print(f"{run_dir}: run {parent['run_id'][:12]} was trained to update {done} in {parent['run_dir']}; "
                  f"trained further here it is a run of its own, {rec['run_id'][:12]} (continued from "
                  f"{parent['run_id'][:12]}; run.json continued_from)", file=sys.stderr)
        rec["run_dir"] = os.path.realpath(run_dir)
        rec["code"] = code_version()
        rec["trainings"].append({"max_update": max_update, "from_update": done, "to_update": None,
                                 "world_size": new["batch"]["world_size"], "update_freq": new["batch"]["update_freq"],
                                 "started": now(), "finished": None, "code": rec["code"],
                                 "argv": launch_key(argv) if argv is not None else None,
                                 "cpu_threads": cpu_threads(cfg),
                                 "adopted_from_checkpoints": adopted or None})
        save(run_dir, rec)
    return True


def patience_stop_before(run_dir: str, patience: int, done: int) -> Optional[int]:
    """The update by ``done`` at which fairseq's ``--patience`` stops the run, from the validation losses
    of its train.log (:func:`fairseq_attn_reports.curves.patience_stop`); None: not by then (or no log)."""
    log = os.path.join(run_dir, "train.log")
    if not patience or patience <= 0 or not done or not os.path.isfile(log):
        return None
    from fairseq_attn_reports.curves import patience_stop, validation_losses
    return patience_stop(validation_losses(log, done), patience)


def past_stop_message(run_dir: str, rec: Dict, patience: int, stop: int, done: int) -> str:
    """A run trained past the stop of ``patience``, refused in one line naming both."""
    trained = trained_patiences(rec)
    how = f" (trained with --patience {', '.join(map(str, trained))})" if trained else ""
    return (f"{run_dir} was trained to update {done}{how}, past where --patience {patience} stops it: update {stop} "
            f"(the validation losses of its train.log); a run past its stop is not trained further: give a "
            f"--patience {patience} run its own folder (SAVE_DIR), or train this one with the patience it had")


def resume_update(run_dir: str) -> Optional[int]:
    """The update a training of ``run_dir`` resumes from (its record's, as start_run left it)."""
    rec = load(run_dir)
    return (rec or {}).get("num_updates")


def finish_run(run_dir: str, stopped: Optional[str] = None) -> Dict:
    """After training: the checkpoints it saved, with the update number each one holds, what
    stopped it (``"patience"``: fairseq's --patience; else None, --max-update or another limit),
    and what it has seen (:func:`training_seen`)."""
    rec = load(run_dir)
    if rec is None:
        raise RecordError(f"{run_dir}: no run record (run.json); it is written before training")
    rec["checkpoints"] = scan_checkpoints(run_dir, rec.get("checkpoints"))
    points = save_points(rec["checkpoints"])
    rec["num_updates"] = points[-1]["num_updates"] if points else None
    if rec["trainings"]:
        rec["trainings"][-1].update(to_update=rec["num_updates"], finished=now(), stopped=stopped)
    rec["epoch"], rec["seen"] = training_seen(run_dir, rec)
    record_tuned_paths(run_dir, rec)
    save(run_dir, rec)
    return rec


#: the run's ``--attn-backend tuned`` choices while it trains (the training's layers read and add
#: to it: :data:`fairseq_attn_core.backends.tuning.RUN_ENV`); the record keeps them as ``tuned_paths``
TUNED_PATHS = "tuned_paths.json"


def tuned_paths_file(run_dir: str) -> str:
    return os.path.join(run_dir, TUNED_PATHS)


def keep_tuned_paths(run_dir: str, rec: Dict, continued: bool) -> None:
    """Before a training: the run's choices file holds the record's ``tuned_paths`` (a resumed
    run trains its shape classes on the paths it chose before, whatever this machine's cache
    says), and, for a run ``continued`` from its checkpoints, what the file held beyond them (a
    training killed before it finished); a new run starts with none."""
    from pathlib import Path

    from fairseq_attn_core.backends import tuning

    path = Path(tuned_paths_file(run_dir))
    choices = tuning.read_choices(path) if continued else {}
    choices.update(rec.get("tuned_paths") or {})
    if choices or path.exists():
        tuning.write_choices(path, choices)
    if choices:
        rec["tuned_paths"] = choices


def record_tuned_paths(run_dir: str, rec: Dict) -> None:
    """After a training: the choices its tuned layers made, into the record (``tuned_paths``)."""
    from pathlib import Path

    from fairseq_attn_core.backends import tuning

    choices = {**tuning.read_choices(Path(tuned_paths_file(run_dir))), **(rec.get("tuned_paths") or {})}
    if choices:
        rec["tuned_paths"] = choices


def refresh_seen(run_dir: str) -> bool:
    """A finished run whose record could not say what it has seen (``epoch["unknown"]``, e.g. written
    before the last epoch cut short by the stop was read as such) has it read again from its
    train.log and data; True when the record changed."""
    rec = load(run_dir)
    if not rec or rec.get("num_updates") is None or not (rec.get("epoch") or {}).get("unknown"):
        return False
    epoch, seen = training_seen(run_dir, rec)
    if epoch == rec.get("epoch") and seen == rec.get("seen"):
        return False
    rec["epoch"], rec["seen"] = epoch, seen
    save(run_dir, rec)
    return True


def training_seen(run_dir: str, rec: Dict):
    """(``epoch``, ``seen``) of a run (:mod:`fairseq_attn_records.training_seen`): one epoch of its
    data (updates from the per-epoch records of its train.log; pairs, original pairs and tokens from
    the data's binarised training set) and what it has seen at its last update. Parts that cannot be
    read (no epoch ended yet, no data folder) are None: said, never guessed."""
    from fairseq_attn_records import training_seen as ts
    from fairseq_attn_reports.curves import read_log_records

    data = rec.get("data") or {}
    epoch = {"updates": None, "pairs": None, "original_pairs": None, "src_tokens": None, "tgt_tokens": None}
    log = os.path.join(run_dir, "train.log")
    if os.path.isfile(log):
        ends = [(int(st["epoch"]), int(float(st["train_num_updates"])))
                for kind, st in read_log_records(log) if kind == "train" and "train_num_updates" in st]
        try:
            epoch["updates"] = ts.updates_per_epoch(ends)
        except ValueError as e:  # e.g. resumed with another number of workers: said, not guessed
            epoch["unknown"] = f"{log}: {e}"
    settings, pairs = data.get("settings") or {}, data.get("train_pairs") or {}
    if data.get("path") and settings.get("SRC") and settings.get("TGT"):
        original = (pairs.get("concat") or {}).get("original", pairs.get("clean"))
        try:
            epoch.update(ts.epoch_content(data["path"], settings["SRC"], settings["TGT"], original))
        except (OSError, ValueError):
            pass
    return epoch, ts.seen_at(epoch, rec["num_updates"]) if rec.get("num_updates") is not None else None
