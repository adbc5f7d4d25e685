"""Safe loading of fairseq checkpoints under torch >= 2.6.

torch >= 2.6 unpickles with ``weights_only=True`` by default, which refuses the
``argparse.Namespace`` (and a few other plain classes) that every fairseq
checkpoint holds, so ``fairseq-generate`` and resuming fail. Instead of turning
the safety off (``weights_only=False`` runs arbitrary pickled code), we
allowlist exactly the classes fairseq itself writes into a checkpoint. Any
other pickled object is still refused, with a message that says so.
"""

import argparse
import collections
import functools
import pickle
import re

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
    except ImportError:  # pragma: no cover
        pass
    try:  # numpy scalars (e.g. best validation loss) in extra_state
        import numpy as np

        allowed += [np.dtype, type(np.dtype("float64")), type(np.dtype("float32"))]
        try:
            from numpy._core.multiarray import scalar
        except ImportError:  # numpy < 2
            from numpy.core.multiarray import scalar
        allowed.append(scalar)
    except ImportError:  # pragma: no cover
        pass
    try:  # training meters in extra_state["train_meters"]
        from fairseq.logging import meters

        allowed += [meters.AverageMeter, meters.TimeMeter, meters.StopwatchMeter,
                    meters.MetersDict, meters.SumMeter]
    except (ImportError, AttributeError):  # pragma: no cover
        pass
    return allowed


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint holds a pickled object outside fairseq's own checkpoint classes."""


def _refused_class(message: str) -> str:
    m = re.search(r"GLOBAL ([\w.]+)", message) or re.search(r"global[^`'\"]*[`'\"]([\w.]+)", message)
    return m.group(1) if m else "unknown"


def refusal_message(path, error: Exception) -> str:
    cls = _refused_class(str(error))
    return (
        f"refusing to load checkpoint {path!r}: it contains a pickled object of class "
        f"{cls!r}, which is not one of fairseq's checkpoint classes (torch >= 2.6 loads with "
        f"weights_only=True and fairseq_attn_plugins allowlists only those). Loading it could run "
        f"arbitrary code. If you wrote this file yourself and trust it, allowlist that class with "
        f"torch.serialization.add_safe_globals([...]) before loading; do not disable weights_only."
    )


def _wrap_loader(load):
    @functools.wraps(load)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return load(path, *args, **kwargs)
        except UnsafeCheckpointError:
            raise
        except pickle.UnpicklingError as e:
            raise UnsafeCheckpointError(refusal_message(path, e)) from e

    load_checkpoint_to_cpu._attn_plugins_safe = True
    return load_checkpoint_to_cpu


def _install_clear_refusal() -> None:
    """Make fairseq's checkpoint loader name the file and the refused class."""
    try:
        from fairseq import checkpoint_utils
    except ImportError:  # pragma: no cover
        return
    load = checkpoint_utils.load_checkpoint_to_cpu
    if not getattr(load, "_attn_plugins_safe", False):
        checkpoint_utils.load_checkpoint_to_cpu = _wrap_loader(load)


def install() -> None:
    """Allowlist fairseq's checkpoint classes for ``torch.load(weights_only=True)``."""
    global _installed
    if _installed or not hasattr(torch.serialization, "add_safe_globals"):
        return
    torch.serialization.add_safe_globals(fairseq_checkpoint_globals())
    _install_clear_refusal()
    _installed = True
