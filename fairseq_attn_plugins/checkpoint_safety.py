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


def install() -> None:
    """Allowlist fairseq's checkpoint classes for ``torch.load(weights_only=True)``."""
    global _installed
    if _installed or not hasattr(torch.serialization, "add_safe_globals"):
        return
    torch.serialization.add_safe_globals(fairseq_checkpoint_globals())
    _installed = True
