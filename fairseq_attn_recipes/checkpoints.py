"""Checkpoints: the save points of a run with their update numbers, and their average."""

import json
import os
import re
import shlex
from typing import Optional

from .step_inputs import die
from fairseq_attn_records import run_record
from fairseq_attn_records.run_record import RecordError, newest_checkpoint
from fairseq_attn_records.output_files import staged, write_json, write_lines

from .recording import last_save_points, scan_checkpoints


def checkpoints_to_average(run_dir: str, n: int, at_update: Optional[int] = None):
    """The newest ``n`` save points of a run, newest first, the final one included: every
    ``checkpoint_E_U.pt`` and ``checkpointE.pt`` (fairseq writes the epoch file instead of the
    interval one where a save point falls on an epoch end) and ``checkpoint_last.pt`` for a final
    update no other file holds, each placed by the update number in its own state, not by its
    name. Fewer than ``n`` is an error, not a smaller average. Returns [{"file", "num_updates",
    "epoch"}] with ``file`` a path.

    The update numbers of the files the run record lists unchanged (size and mtime) are taken from
    it, as ``evaluated-before`` does, so that reusing an average made before starts neither torch
    nor fairseq; the others are read from the files (a run without a readable record: all)."""
    try:
        rec = run_record.load(run_dir) or {}
    except RecordError:
        rec = {}  # averaging never depended on the record: its files are read instead
    try:
        points = last_save_points(run_dir, n, scan_checkpoints(run_dir, rec.get("checkpoints")), at_update)
    except RecordError as e:
        die(str(e))
    return [dict(p, file=os.path.join(run_dir, p["file"])) for p in points]


def average_states(paths):
    """fairseq's average_checkpoints.py: the other entries from the first (newest) checkpoint;
    fp16 parameters summed in fp32 (other dtypes in their own), in the given order, then divided
    (integers: floor division). Every file goes through fairseq's loader as wrapped by
    fairseq_attn_plugins.checkpoint_safety (torch weights_only with fairseq's classes allowlisted)."""
    import collections

    import torch
    from fairseq_attn_plugins import registration
    registration.register()  # installs the safe loader
    from fairseq import checkpoint_utils

    sums, keys, new_state = collections.OrderedDict(), None, None
    for path in paths:
        try:
            state = checkpoint_utils.load_checkpoint_to_cpu(path)
        except Exception as e:  # refused, corrupt or empty: the loader's message, once, no traceback
            msg = str(e)
            die(msg if os.path.basename(path) in msg else f"{path}: {type(e).__name__}: {msg}")
        if new_state is None:
            new_state = state
        params = state["model"]
        if keys is None:
            keys = list(params)
        elif list(params) != keys:
            die(f"{path}: its parameters differ from {paths[0]}'s; these checkpoints are not of one model")
        for k in keys:
            v = params[k]
            if v.dtype == torch.float16:
                v = v.float()
            if k in sums:
                sums[k] += v
            else:
                sums[k] = v.clone()  # clone: shared parameters appear under several names
    for k, v in sums.items():
        if v.is_floating_point():
            v.div_(len(paths))
        else:
            v //= len(paths)
    new_state["model"] = sums
    return new_state


def _cfg_get(state, *dotted):
    """The first of ``dotted`` found in the checkpoint's cfg (or legacy args)."""
    cfg, args = state.get("cfg"), state.get("args")
    for name in dotted:
        node = cfg
        for part in name.split("."):
            try:
                node = node[part] if hasattr(node, "__getitem__") else getattr(node, part)
            except (KeyError, AttributeError, TypeError, IndexError):
                node = None
            if node is None:
                break
        if node is None and args is not None:
            node = getattr(args, name.split(".")[-1], None)
        if node is not None:
            return list(node) if isinstance(node, (list, tuple)) or type(node).__name__ == "ListConfig" else node
    return None


# the settings that make a number comparable with the papers' (read from the checkpoint itself)
TRAIN_SETTINGS = {
    "arch": ("model._name", "model.arch"), "optimizer": ("optimizer._name",),
    "adam_betas": ("optimizer.adam_betas",), "adam_eps": ("optimizer.adam_eps",),
    "lr": ("optimization.lr",), "lr_scheduler": ("lr_scheduler._name",),
    "warmup_updates": ("lr_scheduler.warmup_updates",), "max_tokens": ("dataset.max_tokens",),
    "update_freq": ("optimization.update_freq",),
    "distributed_world_size": ("distributed_training.distributed_world_size",),
    "max_update": ("optimization.max_update",), "dropout": ("model.dropout",),
    "label_smoothing": ("criterion.label_smoothing",), "fp16": ("common.fp16",), "seed": ("common.seed",),
    "share_all_embeddings": ("model.share_all_embeddings",),
    "share_decoder_input_output_embed": ("model.share_decoder_input_output_embed",),
}


def train_settings(state) -> dict:
    out = {k: _cfg_get(state, *names) for k, names in TRAIN_SETTINGS.items()}
    hist = state.get("optimizer_history") or [{}]
    out["num_updates"] = hist[-1].get("num_updates")
    lr, uf = out["lr"], out["update_freq"]
    out["lr"] = lr[0] if isinstance(lr, (list, tuple)) else lr
    out["update_freq"] = uf[0] if isinstance(uf, (list, tuple)) else uf
    if None not in (out["max_tokens"], out["update_freq"], out["distributed_world_size"]):
        out["tokens_per_update_max"] = out["max_tokens"] * out["update_freq"] * out["distributed_world_size"]
    return out


def _file_state(path: str) -> dict:
    st = os.stat(path)
    return {"file": path, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _made_before(output: str, sources: list):
    """The training settings recorded with ``output`` when it is the average of exactly these
    files as they are now (path, size, mtime) and itself unchanged since; else None."""
    try:
        with open(output + ".made.json", encoding="utf-8") as f:
            made = json.load(f)
        if made["sources"] == sources and made["output"] == _file_state(output):
            return made["settings"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def cmd_average(args):
    """Average the parameters of the last N checkpoints as fairseq's scripts/average_checkpoints.py
    (that script is not in the pip package); --record writes what was averaged and the training
    settings read from the checkpoint. An average made before from the same files, unchanged
    (``OUTPUT.made.json``: each source's size and mtime, the output's), is reused without loading
    anything: the length study evaluates each run once per k."""
    newest = newest_checkpoint(args.dir)  # before reading: a checkpoint written later makes this stale
    points = checkpoints_to_average(args.dir, args.n, args.at_update)
    paths = [p["file"] for p in points]
    sources = [_file_state(p) for p in paths]
    settings = _made_before(args.output, sources)
    if settings is None:
        import torch

        state = average_states(paths)
        if state.get("cfg") is not None and not isinstance(state["cfg"], dict):
            from omegaconf import OmegaConf  # saved as a plain container, as fairseq's trainer does
            state["cfg"] = OmegaConf.to_container(state["cfg"], resolve=True, enum_to_str=True)
        settings = train_settings(state)
        with staged(args.output) as tmp:
            torch.save(state, tmp)
        write_lines(args.output + ".sources", paths)
        write_json(args.output + ".made.json", {"sources": sources, "output": _file_state(args.output),
                                                "settings": settings})
        made = "averaged"
    else:
        made = "the average made before from the same files, reused"
    if args.record:
        record = {"n_avg": len(paths), "averaged_checkpoints": [os.path.basename(p) for p in paths],
                  "averaged": [{"file": os.path.basename(p["file"]), "num_updates": p["num_updates"],
                                "epoch": p["epoch"]} for p in points],
                  "checkpoints_mtime_ns": newest["mtime_ns"] if newest else None}
        record.update(settings)
        write_lines(args.record, [json.dumps(record, indent=2)])
    print(f"{made}: {len(paths)} checkpoints: " + " ".join(
        f"{os.path.basename(p['file'])} (update {p['num_updates']})" for p in points))


EPOCH_FILE = re.compile(r"checkpoint(\d+)\.pt")


def _flag_value(argv, flag: str) -> Optional[int]:
    """The integer value of ``flag`` in a recorded argv (``--flag V`` or ``--flag=V``), or None."""
    for i, a in enumerate(argv):
        value = argv[i + 1] if a == flag and i + 1 < len(argv) else a.split("=", 1)[1] if a.startswith(flag + "=") else None
        if value is not None and value.lstrip("-").isdigit():
            return int(value)
    return None


def epoch_files_to_prune(checkpoints: dict, keep: int, pattern: Optional[int]) -> list:
    """The epoch checkpoints (``checkpointE.pt``) fairseq's rule for its interval ones would prune:
    all but the newest ``keep`` among those whose update is not a multiple of ``pattern`` (those are
    never pruned). The newest N save points of the run, N <= ``keep``, are the same before and after
    (each is among the newest N of its kind), so every average of N_AVG <= keep checkpoints and every
    learning-curve point (a multiple of ``pattern``) stays."""
    epochs = sorted(((info["num_updates"], name) for name, info in checkpoints.items()
                     if EPOCH_FILE.fullmatch(name) and info.get("num_updates") is not None), reverse=True)
    prunable = [name for u, name in epochs if not (pattern and pattern > 0 and u % pattern == 0)]
    return prunable[keep:]


def cmd_prune_epoch_checkpoints(args):
    """A run's epoch checkpoints that the rule its last training gave fairseq for the interval ones
    (--keep-interval-updates K, --keep-interval-updates-pattern P) would prune: shown with their sizes,
    removed only with --yes (``--summary``: the totals in one line, as train.sh prints them). A run
    validated by updates (lengths.sh's CONVERGE) saves one at every epoch end, hundreds for a small
    corpus, which fairseq never prunes. checkpoint_last.pt (resumption), checkpoint_best.pt and the
    interval checkpoints are left alone; the validation history is in train.log and the run record."""
    if not os.path.isdir(args.run_dir):
        die(f"--run-dir {args.run_dir}: no such folder")
    try:
        rec = run_record.load(args.run_dir)
    except RecordError as e:
        die(str(e))
    if rec is None:
        die(f"--run-dir {args.run_dir}: no run record (run.json), so its training's --keep-interval-updates is unknown")
    argv = ((rec.get("trainings") or [{}])[-1].get("argv")) or []
    keep = _flag_value(argv, "--keep-interval-updates")
    doomed = []
    if keep and keep >= 1:  # without it fairseq keeps every interval checkpoint: every epoch one is kept too
        checkpoints = scan_checkpoints(args.run_dir, rec.get("checkpoints"))
        doomed = epoch_files_to_prune(checkpoints, keep, _flag_value(argv, "--keep-interval-updates-pattern"))
    if not doomed:
        if not args.summary:
            print(f"{args.run_dir}: no epoch checkpoint to remove")
        return
    size = sum(checkpoints[name]["bytes"] for name in doomed)
    rule = f"as fairseq prunes the interval ones (--keep-interval-updates {keep}): the newest {keep} and the learning curve's kept"
    for name in doomed:
        if args.yes:
            os.remove(os.path.join(args.run_dir, name))
        if not args.summary:
            print(f"{'removed' if args.yes else 'would remove'} {os.path.join(args.run_dir, name)} "
                  f"({checkpoints[name]['bytes'] / 1e6:.1f} MB)")
    if args.yes:
        for name in doomed:
            checkpoints.pop(name)
        rec["checkpoints"] = checkpoints
        run_record.save(args.run_dir, rec)
        print(f"{args.run_dir}: {len(doomed)} epoch checkpoints removed ({size / 1e6:.1f} MB), {rule}")
    else:
        command = f"python -m fairseq_attn_recipes prune-epoch-checkpoints --run-dir {shlex.quote(args.run_dir)} --yes"
        print(f"{args.run_dir}: {len(doomed)} epoch checkpoints ({size / 1e6:.1f} MB) could be removed, {rule}; "
              f"nothing was removed; to remove them: {command}")


def add_parsers(sub) -> None:
    """This module's steps on the command line (``python -m fairseq_attn_recipes STEP``)."""
    p = sub.add_parser("prune-epoch-checkpoints", help="show a run's epoch checkpoints that fairseq's rule for its "
                       "interval ones would prune (--keep-interval-updates, --keep-interval-updates-pattern of its "
                       "training); removed with --yes")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--yes", action="store_true", help="remove them (without it nothing is removed)")
    p.add_argument("--summary", action="store_true", help="only the line of totals, not each file")
    p.set_defaults(fn=cmd_prune_epoch_checkpoints)
    p = sub.add_parser("average"); p.add_argument("dir"); p.add_argument("--n", type=int, default=5)
    p.add_argument("--output", required=True); p.add_argument("--record")
    p.add_argument("--at-update", type=int, help="the save points up to that update's, which must exist (a learning curve's point)")
    p.set_defaults(fn=cmd_average)
