"""``--attn-backend tuned``: per shape class, the fastest of the paths that can run it, measured
on this machine.

A layer's call belongs to a shape class (:func:`class_key`): the device type, the dtype, the
layer's form (its pieces and their distance form, heads and head size, training or inference,
causal, incremental, weights requested, dropout) and a length bucket (the next power of two of
its key length, at least the policy's ``tune_min_bucket``, 16). On the first call of a class
the :class:`Tuned` path looks for the choice, in this order:

1. the run's choices (:data:`RUN_ENV`: a file the recipes' training keeps beside the run
   record, ``SAVE_DIR/tuned_paths.json``; the record holds them too): a resumed run keeps the
   paths it trained with, so resumption stays exact;
2. this machine's cache file (:func:`cache_file`, keyed by the device's name, the CPU threads,
   the versions of torch, triton and this package and a hash of the paths' sources;
   :data:`CACHE_ENV` moves its folder, default ``~/.cache/fairseq_attn``, or
   ``$XDG_CACHE_HOME/fairseq_attn``): every later run on the machine takes the same choice;
3. else it times every candidate (:func:`candidates`: the paths that can run the call, with the
   policy's length thresholds lifted; flex on CUDA for inference only, as ``auto``: eager on
   the CPU it is dense and slow) on the call's own
   q, k, v, forward and, for a training call, backward (one warm-up, the policy's
   ``tune_rounds`` timed rounds, the fastest round; the random generators forked, so training draws the same
   numbers; a candidate that fails is dropped with a warning), and writes the fastest to the
   cache file and the run's file.

Several processes (the ranks of a distributed training, several trainings on one machine) time
and write for themselves: a choice is added under an exclusive lock (``fcntl.flock`` on
``.NAME.lock`` beside the file), re-reading the file and merging, so no process's choices are
lost; the file is written whole to a temporary name in its folder and renamed over the old one
(``os.replace``), so no reader ever sees it half-written. A file that is nonetheless unreadable or
not of this format (damaged outside this package: a disk filled up, a hand edit) is refused with
one line naming it (:class:`PieceConfigError`), never silently timed again and overwritten: its
choices may be what makes a resumed run exact. Removing it is the fix (the cache is made again;
the recipes write a run's file again from its run record). A cache file made for another machine
is ignored with a warning. The candidates equal each other to the tolerances of the paths' own
tests (tests/test_tuned_backend.py loops over them): tuning changes speed, not results beyond them.
"""

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import platform
import time
from functools import lru_cache
from importlib import metadata
from pathlib import Path as FilePath
from typing import Dict, Optional, Tuple

import torch

from ..settings import PieceConfigError
from .base import CUDA, Call, Layer, Path
from .blocks import QueryBlocks
from .distance.bias_path import DistanceBias
from .distance.flex_forms import FlexPiece
from .distance.triton_path import FORCED
from .explicit import Explicit
from .flex import FlexBand
from .local import BlockLocal
from .policy import Policy
from .regions import RegionSplit
from .sdpa import Fused

logger = logging.getLogger(__name__)

#: the folder of the cache files (default: $XDG_CACHE_HOME/fairseq_attn or ~/.cache/fairseq_attn)
CACHE_ENV = "FAIRSEQ_ATTN_CACHE_DIR"
#: the run's choices file (the recipes' training sets it to SAVE_DIR/tuned_paths.json)
RUN_ENV = "FAIRSEQ_ATTN_TUNED_RUN"
FORMAT = 1


@lru_cache(maxsize=None)
def _candidates(policy: Policy) -> Tuple[Path, ...]:
    return (FORCED, FlexPiece(devices=CUDA, trains=False), FlexBand(devices=CUDA, trains=False), RegionSplit(), QueryBlocks(),
            DistanceBias(), BlockLocal(block=policy.local_block), Fused(), Explicit())


def candidates(layer: Layer, call: Call) -> Tuple[Path, ...]:
    """The paths that can run ``call`` of ``layer``, length thresholds lifted (explicit always)."""
    return tuple(p for p in _candidates(layer.policy) if not p.not_supported_reasons(layer, call))


def length_bucket(n: int, smallest: int = 16) -> int:
    return max(smallest, 1 << (max(n, 1) - 1).bit_length())


def class_key(layer: Layer, call: Call, dtype: torch.dtype, heads: int, head_dim: int) -> str:
    """The shape class of a call, e.g. ``cuda|float16|t5bias buckets h8d64|train causal|L512``."""
    d = layer.distance
    form = " ".join([",".join(layer.pieces) or "none"]
                    + ([f"clip{d.clip}" if d.clip is not None else "", "keys" if d.keys else "",
                        "values" if d.values else "", d.bias or ""] if d is not None else [])
                    + ([f"band{layer.band_half}"] if layer.band_half is not None else [])
                    + [f"h{heads}d{head_dim}"])
    kind = " ".join(["train" if call.backward else "infer"]
                    + [w for w, on in (("causal", call.attn_mask), ("incremental", call.incremental),
                                       ("weights", call.need_weights), ("dropout", call.dropout_p > 0)) if on])
    device = "cuda" if call.on_cuda else "cpu"
    return f"{device}|{str(dtype).replace('torch.', '')}|{' '.join(form.split())}|{kind}|L{length_bucket(call.src_len, layer.policy.tune_min_bucket)}"


# ---------------------------------------------------------------------------
# the files
# ---------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _version(dist: str) -> Optional[str]:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=None)
def _sources_hash() -> str:
    """A hash of the paths' sources (a change of a path's code is another cache)."""
    h = hashlib.sha256()
    for f in sorted(FilePath(__file__).parent.rglob("*.py")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def machine_key(device: torch.device) -> Dict[str, str]:
    """What a cache file is valid for: the device, the versions, the paths' sources."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"{platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"
    return {"device": name, "torch": torch.__version__, "triton": _version("triton") or "none",
            "fairseq_attn_plugins": _version("fairseq_attn_plugins") or "unknown", "sources": _sources_hash()}


def cache_folder() -> FilePath:
    if os.environ.get(CACHE_ENV):
        return FilePath(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return FilePath(base) / "fairseq_attn"


def cache_file(key: Dict[str, str]) -> FilePath:
    """This machine's cache file (one per :func:`machine_key`)."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_folder() / f"tuned_paths-{digest}.json"


def _read(path: FilePath) -> Optional[Dict]:
    """A choices file's content (None: no such file); PieceConfigError naming it when it is
    unreadable or not of this format (module docstring)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        ok = (isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("choices"), dict)
              and all(isinstance(k, str) and isinstance(v, str) for k, v in data["choices"].items()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        ok = False
    if not ok:
        raise PieceConfigError(f"{path}: not a tuned-paths file of format {FORMAT} (unreadable or damaged; this "
                               f"package writes it whole under a lock): remove it (a cache is made again, a run's "
                               f"file is written again from its run record by the recipes)")
    return data


def _for_key(data: Optional[Dict], path: FilePath, key: Optional[Dict[str, str]]) -> Dict:
    """``data``, or ``{}`` for no file and, with a warning, for a cache file made for another machine."""
    if data is None:
        return {}
    if key is not None and data.get("key") != key:
        logger.warning("%s: made for %s, not this machine's %s: ignored", path, data.get("key"), key)
        return {}
    return data


def read_choices(path: FilePath, key: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """class -> path name of a choices file (a cache file: made for ``key``); ``{}`` for a
    missing file and, with a warning, for one made for another machine; PieceConfigError for a
    damaged one."""
    return dict(_for_key(_read(path), path, key).get("choices") or {})


def write_choices(path: FilePath, choices: Dict[str, str], key: Optional[Dict[str, str]] = None,
                  times: Optional[Dict[str, Dict[str, float]]] = None) -> None:
    """The file whole (a temporary name in its folder, then renamed: never half-written under its name)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": FORMAT, "choices": dict(sorted(choices.items()))}
    if key is not None:
        data["key"] = key
    if times:
        data["times_ms"] = times
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(path: FilePath):
    """An exclusive lock of the choices file ``path`` across processes (``.NAME.lock`` beside it),
    held for a read, merge and write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield  # released when the file is closed


def add_choice(path: FilePath, cls: str, name: str, key=None, ms=None) -> None:
    """Add one choice to a choices file, merged under its lock with what other processes wrote."""
    try:
        with locked(path):
            data = _for_key(_read(path), path, key)
            choices, times = dict(data.get("choices") or {}), dict(data.get("times_ms") or {})
            if choices.get(cls) == name and ms is None:
                return
            choices[cls] = name
            if ms is not None:
                times[cls] = ms
            write_choices(path, choices, key, times if key is not None else None)
    except OSError as e:
        logger.warning("%s: cannot write the tuned paths (%s): kept for this process only", path, e)


# ---------------------------------------------------------------------------
# timing and the path
# ---------------------------------------------------------------------------
def time_paths(paths, q, k, v, ctx, run, backward: bool, rounds: int = 3) -> Dict[str, float]:
    """path name -> the fastest of ``rounds`` timed runs (ms) on detached copies of q, k, v,
    after one warm-up; forward, and backward for a training call (gradients of q, k, v only:
    no parameter's ``.grad`` changes). The random generators are forked: the training draws
    the same numbers as without tuning. A path that fails is left out with a warning."""
    cuda = q.is_cuda
    out_ms = {}
    with torch.random.fork_rng(devices=[q.device] if cuda else []):
        for path in paths:
            try:
                best = float("inf")
                for r in range(1 + rounds):
                    leaves = [t.detach().requires_grad_(backward) for t in (q, k, v)]
                    c = dataclasses.replace(ctx, cache=dict(ctx.cache) if ctx.cache is not None else None)
                    if cuda:
                        torch.cuda.synchronize(q.device)
                    t0 = time.perf_counter()
                    with torch.set_grad_enabled(backward):
                        out, _ = path.apply(*leaves, c, dataclasses.replace(run))
                        if backward:
                            torch.autograd.grad(out, leaves, out.detach(), allow_unused=True)
                    if cuda:
                        torch.cuda.synchronize(q.device)
                    if r:
                        best = min(best, time.perf_counter() - t0)
                out_ms[path.name] = 1e3 * best
            except Exception as e:  # noqa: BLE001 - a candidate that cannot run this call is not chosen
                logger.warning("--attn-backend tuned: the %s path failed on this call (%s: %s): not a candidate",
                               path.name, type(e).__name__, str(e).splitlines()[0] if str(e) else "")
                if cuda:
                    torch.cuda.empty_cache()
    return out_ms


@dataclasses.dataclass(frozen=True)
class Tuned(Path):
    """The path of ``--attn-backend tuned``: the choice of the call's shape class (module
    docstring), remembered per layer in ``run.tuned`` (class -> (path name, where it came
    from: ``"run"``, ``"cache"`` or ``"timed"``))."""

    name = "tuned"
    gives_weights = True

    def choose(self, q, k, v, ctx, run) -> Path:
        layer, call = run.layer, run.call
        if run.tuned is None:  # a run made without a layer's choices: this call's alone
            run.tuned = {}
        B, H, T, D = q.shape
        cls = class_key(layer, call, q.dtype, H, D)
        paths = {p.name: p for p in candidates(layer, call)}
        known = run.tuned.get(cls)
        if known is not None and known[0] in paths:
            return paths[known[0]]
        run_file = os.environ.get(RUN_ENV)
        run_path = FilePath(run_file) if run_file else None
        key = machine_key(q.device)
        cache = cache_file(key)
        name, source = None, None
        if run_path is not None:
            name, source = read_choices(run_path).get(cls), "run"
        if name is None:
            name, source = read_choices(cache, key).get(cls), "cache"
        if name is not None and name not in paths:
            logger.warning("--attn-backend tuned: %s chose the %s path for %s, which cannot run it here: timed again",
                           run_path if source == "run" else cache, name, cls)
            name = None
        ms = None
        if name is None:
            ms = time_paths(tuple(paths.values()), q, k, v, ctx, run, call.backward, layer.policy.tune_rounds)
            name, source = (min(ms, key=ms.get) if ms else "explicit"), "timed"
            logger.info("--attn-backend tuned: %s -> %s (%s)", cls, name,
                        ", ".join(f"{n} {t:.3g} ms" for n, t in sorted(ms.items(), key=lambda x: x[1])))
            add_choice(cache, cls, name, key, ms)
        if run_path is not None and source != "run":
            add_choice(run_path, cls, name)
        run.tuned[cls] = (name, source)
        return paths[name]

    def apply(self, q, k, v, ctx, run):
        path = self.choose(q, k, v, ctx, run)
        run.ran = path.name
        return path.apply(q, k, v, ctx, run)
