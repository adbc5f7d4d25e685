"""The documented import path of the safe checkpoint loader
(``fairseq_attn_plugins.checkpoint_safety.safe_load``); it lives in
:mod:`fairseq_attn_plugins.integration.checkpoint_safety`."""

from .integration.checkpoint_safety import CorruptCheckpointError, UnsafeCheckpointError, safe_load  # noqa: F401
