"""What a checkpoint holds about its run, read without reading its tensors: the update number
and epoch it was saved at, and the identity of the run its configuration describes
(:func:`fairseq_attn_records.run_record.identity_of_cfg`). Read memory-mapped under the checkpoint
allowlist (:mod:`.checkpoint_safety`); a file that cannot be read is a one-line
:class:`~fairseq_attn_records.run_record.RecordError` naming it."""

from typing import Dict

import torch
from fairseq_attn_records.checkpoint_config import saved_at
from fairseq_attn_records.run_record import RecordError, identity_of_cfg

from .checkpoint_safety import corrupt_message, install


def mapped_state(path: str) -> Dict:
    """The checkpoint's state, memory-mapped (the tensors are not read)."""
    install()
    try:
        return torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except Exception as e:  # corrupt, truncated or refused: named, no traceback
        raise RecordError(corrupt_message(path, e)) from None


def checkpoint_state(path: str) -> Dict:
    """Update number and epoch a checkpoint holds, read from its own state."""
    return saved_at(mapped_state(path))


def identity_of_checkpoint(path: str) -> Dict:
    """Identity from the configuration a checkpoint holds."""
    state = mapped_state(path)
    if state.get("cfg") is None:
        raise RecordError(f"{path}: the checkpoint holds no configuration (cfg)")
    return identity_of_cfg(state["cfg"])
