"""Safe loading of fairseq checkpoints under torch >= 2.6.

torch >= 2.6 unpickles with ``weights_only=True`` by default, which refuses the
``argparse.Namespace`` (and a few other plain classes) that every fairseq
checkpoint holds, so ``fairseq-generate`` and resuming fail. Instead of turning
the safety off (``weights_only=False`` runs arbitrary pickled code), we
allowlist exactly the classes fairseq itself writes into a checkpoint, and those of
the loaded state rank 0 sends to the other ranks of a resumed multi-process run
(fairseq's ``broadcast_object`` goes through ``torch.load`` too: without them every
multi-GPU or multi-process CPU run failed to resume). Any other pickled object is
still refused, with a message that says so.

Only a real refusal (the unpickler met a class outside the allowlist) talks
about security (:class:`UnsafeCheckpointError`). A missing, empty, truncated or
otherwise unreadable file raises :class:`CorruptCheckpointError` naming the
file and saying what is wrong with it. :func:`safe_load` is the one entry point
for code that reads checkpoints itself (e.g. checkpoint averaging); fairseq's
``checkpoint_utils.load_checkpoint_to_cpu`` gives the same errors through
:func:`named_errors` (installed by :mod:`.integration.fixes`).
"""

import argparse
import collections
import functools
import os
import pickle
import re
import struct
import typing
import zipfile

import torch

_installed = False


def fairseq_checkpoint_globals():
    """The classes a fairseq checkpoint holds beyond tensors and builtins."""
    allowed = [argparse.Namespace, collections.OrderedDict, collections.defaultdict]
    try:  # omegaconf containers appear in hydra-era configs
        from omegaconf import DictConfig, ListConfig
        from omegaconf.base import ContainerMetadata, Metadata
        from omegaconf.nodes import AnyNode

        allowed += [DictConfig, ListConfig, ContainerMetadata, Metadata, AnyNode]
        # the types their metadata names (object, key and element types), pickled as classes when
        # fairseq sends a loaded checkpoint's config to the other ranks of a resumed run
        # (``broadcast_object``: torch.save, then torch.load on each rank)
        allowed += [typing.Any, dict, list, tuple, int, float, str, bool]
    except ImportError:  # pragma: no cover
        pass
    try:  # numpy scalars (e.g. best validation loss) in extra_state
        import numpy as np

        # scalars and plain numeric arrays: --eval-bleu keeps BLEU counts (int64 arrays) in the
        # meters, and best_checkpoint_metric values may be any numeric numpy type
        allowed += [np.dtype, np.ndarray]
        allowed += sorted({type(np.dtype(c)) for c in "?bhilqBHILQefdgFDG"}, key=str)
        try:
            from numpy._core.multiarray import _reconstruct, scalar
        except ImportError:  # numpy < 2
            from numpy.core.multiarray import _reconstruct, scalar
        allowed += [scalar, _reconstruct]
    except ImportError:  # pragma: no cover
        pass
    try:  # training meters in extra_state["train_meters"]
        from fairseq.logging import meters

        allowed += [meters.AverageMeter, meters.TimeMeter, meters.StopwatchMeter,
                    meters.MetersDict, meters.SumMeter]
    except (ImportError, AttributeError):  # pragma: no cover
        pass
    try:  # what stands for each tensor of a state fairseq sends to the other ranks (broadcast_object)
        from fairseq.distributed.utils import _TensorPlaceholder

        allowed.append(_TensorPlaceholder)
    except (ImportError, AttributeError):  # pragma: no cover
        pass
    return allowed


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint holds a pickled object outside fairseq's own checkpoint classes."""


class CorruptCheckpointError(pickle.UnpicklingError):
    """A checkpoint file is empty, truncated or not a torch checkpoint at all."""


#: how torch's weights-only unpickler reports a class or function outside the allowlist
_REFUSAL = re.compile(r"Unsupported global|GLOBAL [\w.]+|not an allowed global|"
                      r"Trying to call reduce|safe_globals", re.IGNORECASE)


def _refused_class(message: str) -> str:
    m = re.search(r"GLOBAL ([\w.]+)", message) or re.search(r"global[^`'\"]*[`'\"]([\w.]+)", message)
    return m.group(1) if m else "unknown"


def is_refusal(error: Exception) -> bool:
    """True if ``error`` is the weights-only unpickler refusing a class (not a broken file)."""
    return isinstance(error, pickle.UnpicklingError) and bool(_REFUSAL.search(str(error)))


def corrupt_message(path, error: Exception) -> str:
    try:
        size = os.path.getsize(path)
    except (OSError, TypeError):
        size = None
    if size == 0:
        return (f"checkpoint {path!r} is empty (0 bytes): it was not written completely "
                f"(e.g. the run was killed while saving); use another checkpoint")
    reason = str(error).strip().split("\n")[-1].strip() or type(error).__name__
    if "WeightsUnpickler error" in str(error):
        reason = str(error).split("WeightsUnpickler error:", 1)[1].strip().split("\n")[0] or reason
    size_txt = "" if size is None else f" ({size} bytes)"
    return (f"checkpoint {path!r}{size_txt} is corrupt or truncated, or not a torch checkpoint: "
            f"{type(error).__name__}: {reason[:200]}; use another checkpoint (e.g. the previous "
            f"checkpoint_E_U.pt)")


def refusal_message(path, error: Exception) -> str:
    cls = _refused_class(str(error))
    return (
        f"refusing to load checkpoint {path!r}: it contains a pickled object of class "
        f"{cls!r}, which is not one of fairseq's checkpoint classes (torch >= 2.6 loads with "
        f"weights_only=True and fairseq_attn_plugins allowlists only those). Loading it could run "
        f"arbitrary code. If you wrote this file yourself and trust it, allowlist that class with "
        f"torch.serialization.add_safe_globals([...]) before loading; do not disable weights_only."
    )


#: what torch.load raises for a file it cannot read (beyond UnpicklingError): an empty or
#: truncated legacy pickle (EOFError), random bytes (KeyError, struct.error, ValueError), a
#: truncated zip archive (RuntimeError from PytorchStreamReader, zipfile.BadZipFile)
_UNREADABLE = (EOFError, KeyError, struct.error, ValueError, IndexError, zipfile.BadZipFile,
               UnicodeDecodeError)


def _is_unreadable(error: Exception) -> bool:
    if isinstance(error, (UnsafeCheckpointError, CorruptCheckpointError)):
        return False
    if isinstance(error, pickle.UnpicklingError):
        return not is_refusal(error)
    if isinstance(error, RuntimeError):
        text = str(error)
        return "PytorchStreamReader" in text or "zip archive" in text or "corrupt" in text
    return isinstance(error, _UNREADABLE)


def _raised_by_torch_load(error: Exception) -> bool:
    """Whether ``error`` came out of torch's (un)pickling code, not fairseq's upgrade steps."""
    tb = error.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if name.endswith(("torch/serialization.py", "torch/_weights_only_unpickler.py")):
            return True
        tb = tb.tb_next
    return False


def _translate(path, error: Exception) -> Exception:
    """The error to raise for a failed load of ``path``, or ``error`` itself if unrelated."""
    if not _raised_by_torch_load(error):
        return error
    if is_refusal(error):
        return UnsafeCheckpointError(refusal_message(path, error))
    if _is_unreadable(error):
        return CorruptCheckpointError(corrupt_message(path, error))
    return error


def safe_load(path, map_location="cpu"):
    """``torch.load(path, weights_only=True)`` with fairseq's checkpoint classes allowed.

    Raises ``FileNotFoundError`` (missing file), :class:`CorruptCheckpointError` (empty,
    truncated or unreadable file) or :class:`UnsafeCheckpointError` (a pickled class outside
    fairseq's checkpoint classes), each naming the file. Never falls back to
    ``weights_only=False``."""
    install()
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:
        new = _translate(path, e)
        if new is e:
            raise
        raise new from e


def named_errors(load):
    """fairseq's ``load_checkpoint_to_cpu`` raising :class:`UnsafeCheckpointError` and
    :class:`CorruptCheckpointError` as :func:`safe_load` does (installed by
    :mod:`.integration.fixes`)."""

    @functools.wraps(load)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return load(path, *args, **kwargs)
        except (UnsafeCheckpointError, CorruptCheckpointError):
            raise
        except Exception as e:
            new = _translate(path, e)
            if new is e:
                raise
            raise new from e

    return load_checkpoint_to_cpu


def install() -> None:
    """Allowlist fairseq's checkpoint classes for ``torch.load(weights_only=True)``."""
    global _installed
    if _installed or not hasattr(torch.serialization, "add_safe_globals"):
        return
    torch.serialization.add_safe_globals(fairseq_checkpoint_globals())
    _installed = True
