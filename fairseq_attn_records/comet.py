"""COMET (Rei et al., 2020/2022), optional and offline.

Enabled by ``pip install '.[comet]'`` (unbabel-comet) and ``COMET_MODEL=/path/to/model.ckpt``:
a checkpoint the user staged beforehand (e.g. ``Unbabel/wmt22-comet-da``'s
``checkpoints/model.ckpt``, with its ``hparams.yaml`` one folder up). Nothing is ever
downloaded: the Hugging Face offline switches are set before COMET is imported, so the
encoder named in ``hparams.yaml`` (``pretrained_model``: ``xlm-roberta-large`` for the WMT22
models) must be a local folder or already in the Hugging Face cache (``HF_HOME``).

Scores equal ``comet-score -s SRC -t HYP... -r REF --model CKPT --gpus N --batch_size B``:
the same loading (:func:`comet.load_from_checkpoint`), the same inference steps (``eval``,
``half`` as comet-score does on every device, its embedding cache, length batching; several
GPUs score all systems in one flattened call) and the same input cleaning (each line
stripped). The system score is the mean of the segment scores, so the paired tests of
:func:`.metrics.paired_mean_tests` apply (sacreBLEU's resamples).

* ``COMET_MODEL`` unset: COMET is left out, with :data:`ENABLE_HINT` printed once.
* ``COMET_MODEL`` set but not loadable (no such file, no ``hparams.yaml``, comet not
  installed, an encoder not available offline): :class:`CometError` naming the path and
  the cause, raised by :func:`load` before any other work.
* ``COMET_GPUS`` (default: every visible CUDA GPU, else 0 = CPU), ``COMET_BATCH_SIZE``
  (default 16, comet-score's; ``--comet-batch-size`` on the commands).

COMET checkpoints are read by COMET's own loader (PyTorch Lightning unpickles the whole
file): stage only checkpoints you trust.
"""

import logging
import os
import warnings
from typing import Dict, List, Optional, Sequence

ENABLE_HINT = ("COMET left out: to add it, pip install '.[comet]' and set COMET_MODEL=/path/to/checkpoints/"
               "model.ckpt (a COMET checkpoint staged locally, e.g. Unbabel/wmt22-comet-da; nothing is downloaded)")
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
DEFAULT_BATCH_SIZE = 16


class CometError(ValueError):
    """COMET was asked for (COMET_MODEL) but cannot be used: one line naming the cause."""


def model_path_from_env(environ=os.environ) -> Optional[str]:
    path = environ.get("COMET_MODEL", "").strip()
    return path or None


def default_gpus(environ=os.environ) -> int:
    """``COMET_GPUS``, or every visible CUDA GPU (0 without one: the CPU)."""
    value = environ.get("COMET_GPUS", "").strip()
    if value:
        if not value.isdigit():
            raise CometError(f"COMET_GPUS={value}: give a number of GPUs (0 = CPU)")
        return int(value)
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def batch_size_from(value) -> int:
    """``--comet-batch-size`` (or ``COMET_BATCH_SIZE``), checked."""
    if value is None:
        value = os.environ.get("COMET_BATCH_SIZE", "").strip() or DEFAULT_BATCH_SIZE
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n <= 0:
        raise CometError(f"COMET batch size {value!r}: give a positive integer")
    return n


def check_path(path: str) -> str:
    """The checkpoint file of ``path`` (a ``.ckpt`` file, or a model folder holding
    ``checkpoints/model.ckpt``), with its ``hparams.yaml``; CometError otherwise."""
    if os.path.isdir(path):
        inner = os.path.join(path, "checkpoints", "model.ckpt")
        if not os.path.isfile(inner):
            raise CometError(f"COMET_MODEL={path}: a folder without checkpoints/model.ckpt; give the "
                             f"checkpoint file (a COMET model folder holds checkpoints/model.ckpt and hparams.yaml)")
        path = inner
    if not os.path.isfile(path):
        raise CometError(f"COMET_MODEL={path}: no such file (give a local COMET checkpoint, "
                         f"e.g. .../wmt22-comet-da/checkpoints/model.ckpt; nothing is downloaded)")
    hparams = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))), "hparams.yaml")
    if not os.path.isfile(hparams):
        raise CometError(f"COMET_MODEL={path}: {hparams} is missing (COMET reads it to build the model; "
                         f"keep the checkpoint inside its model folder)")
    return path


def _encoder_name(ckpt: str) -> str:
    hparams = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(ckpt))), "hparams.yaml")
    try:
        import yaml
        with open(hparams, encoding="utf-8") as f:
            return str((yaml.safe_load(f) or {}).get("pretrained_model", "?"))
    except Exception:  # the loader's own error is reported instead
        return "?"


def _quiet_loggers() -> None:
    """PyTorch Lightning's banners ("GPU available", tips) on every predict call."""
    for name in ("pytorch_lightning", "lightning", "lightning_fabric", "comet",
                 "pytorch_lightning.utilities.rank_zero", "lightning.pytorch.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.ERROR)


class CometScorer:
    """A loaded COMET model; :meth:`score_systems` gives the segment scores of each system."""

    def __init__(self, model, path: str, gpus: int, batch_size: int, version: str):
        self.model, self.path, self.gpus, self.batch_size, self.version = model, path, gpus, batch_size, version

    def signature(self, bs_samples: int = None, ar_trials: int = None, seed: str = None) -> str:
        parts = [f"model:{self.path}", f"comet:{self.version}", "precision:half", f"batch:{self.batch_size}"]
        if seed is not None:
            parts.append(f"seed:{seed}")
        if bs_samples:
            parts.append(f"bs:{bs_samples}")
        if ar_trials:
            parts.append(f"ar:{ar_trials}")
        return "|".join(parts)

    def _predict(self, samples: List[Dict]) -> List[float]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = self.model.predict(samples=samples, batch_size=self.batch_size, gpus=self.gpus,
                                     progress_bar=False, accelerator="cpu" if self.gpus == 0 else "auto",
                                     num_workers=None, length_batching=True)
        return [float(s) for s in out.scores]

    def window(self) -> int:
        """The most model tokens (its two special tokens included) COMET reads of one source,
        output or reference: its encoder's ``prepare_sample`` truncates each at ``max_positions -
        2`` (510 for XLM-R's 512 positions), without a word."""
        return int(self.model.encoder.max_positions) - 2

    def over_window(self, texts: Sequence[str]) -> int:
        """How many of ``texts`` (stripped, as scored) are longer than :meth:`window`, so that
        COMET scores only their beginning."""
        if not texts:
            return 0
        ids = self.model.encoder.tokenizer([t.strip() for t in texts], truncation=False)["input_ids"]
        return sum(1 for x in ids if len(x) > self.window())

    def score_systems(self, sources: Sequence[str], refs: Sequence[str],
                      systems: Sequence[Sequence[str]]) -> List[List[float]]:
        """Segment scores of every system (lines stripped, as comet-score reads them)."""
        src = [s.strip() for s in sources]
        ref = [r.strip() for r in refs]
        for hyps in systems:
            if not (len(hyps) == len(src) == len(ref)):
                raise ValueError(f"COMET: {len(src)} source, {len(ref)} reference and {len(hyps)} "
                                 f"hypothesis lines: give one of each per sentence")
        data = [[{"src": s, "mt": h.strip(), "ref": r} for s, h, r in zip(src, hyps, ref)] for hyps in systems]
        if self.gpus > 1:  # comet-score's multi-GPU path: all systems in one call, then split
            flat = self._predict([x for d in data for x in d])
            return [flat[i * len(src):(i + 1) * len(src)] for i in range(len(systems))]
        return [self._predict(d) for d in data]


def load(path: str, gpus: Optional[int] = None, batch_size=None) -> CometScorer:
    """Load the COMET checkpoint at ``path`` offline, as comet-score does; CometError
    with the cause in one line if it cannot be (call before any other work)."""
    ckpt = check_path(path)
    gpus = default_gpus() if gpus is None else gpus
    batch_size = batch_size_from(batch_size)
    for k, v in OFFLINE_ENV.items():
        os.environ[k] = v  # no download, ever: also for the encoder's tokenizer and config
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import comet
            from comet import load_from_checkpoint
    except ImportError as e:
        raise CometError(f"COMET_MODEL is set but unbabel-comet is not installed ({e}); "
                         f"pip install '.[comet]'") from None
    _quiet_loggers()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = load_from_checkpoint(ckpt, local_files_only=True)
    except Exception as e:  # any failure of COMET's loader: one line naming the path and cause
        cause = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CometError(f"COMET_MODEL={path}: does not load ({type(e).__name__}: {cause}); its encoder "
                         f"{_encoder_name(ckpt)!r} (hparams.yaml) must be a local folder or in the Hugging "
                         f"Face cache (HF_HOME), as downloads are off") from None
    model.eval()
    model.half()  # as comet-score does, on every device
    model.set_embedding_cache()
    if gpus > 0:
        import torch
        if torch.cuda.device_count() < gpus:
            raise CometError(f"COMET_GPUS={gpus}, but {torch.cuda.device_count()} CUDA GPU(s) are visible")
    return CometScorer(model, os.path.abspath(ckpt), gpus, batch_size, getattr(comet, "__version__", "?"))
