"""The documented import path of the loaders (``from fairseq_attn_plugins.loading import ...``);
they live in :mod:`fairseq_attn_plugins.integration.loading`."""

from .integration.loading import from_pretrained, load_model_ensemble, load_model_ensemble_and_task  # noqa: F401
