"""A model that cannot train on the trainer's device, refused before the trainer starts.

fairseq builds a model the same way for training and for generation, so the model build cannot
tell whether a backward will run. fairseq's ``Trainer`` is made only by the training commands
(fairseq-train, fairseq-hydra-train, the recipes' training step), after the model is built and
before anything is trained or saved: there, a model with a layer on ``--attn-backend flex`` on
CPU, where torch has no flex_attention backward, or on ``--attn-backend triton`` on CPU (``--cpu``
on a machine with CUDA: its kernels run on CUDA), is refused in one line
(:func:`fairseq_attn_core.backends.check_training_device`) instead of failing at its first
training step with a ``crash.pt`` left behind. Generation on CPU keeps the flex paths.
"""

import torch

from fairseq_attn_core import SelfAttention
from fairseq_attn_core import backends


def check_model(model, cpu: bool) -> None:
    """Refuse training ``model`` on the device ``cpu`` says, for the backend its layers run."""
    for backend in sorted({m.backend for m in model.modules() if isinstance(m, SelfAttention)}):
        backends.check_training_device(backend, cpu)


def checked_init(original):
    """fairseq's ``Trainer.__init__`` refusing the model first (a row of :mod:`.fixes`)."""
    def __init__(self, cfg, task, model, criterion, *args, **kwargs):
        check_model(model, cpu=bool(cfg.common.cpu) or not torch.cuda.is_available())
        original(self, cfg, task, model, criterion, *args, **kwargs)

    return __init__
