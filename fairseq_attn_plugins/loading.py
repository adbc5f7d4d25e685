"""Python routes to a trained model: fairseq's loaders with the plugin in place.

fairseq reads a checkpoint before it imports ``--user-dir``, so under torch >= 2.6
(``weights_only=True``) ``fairseq.checkpoint_utils.load_model_ensemble_and_task``
fails with torch's "Weights only load failed" unless the plugin was imported first
(the import allowlists fairseq's checkpoint classes, :mod:`.checkpoint_safety`).
These functions are fairseq's own, called after that import, with ``user_dir``
pointing at this package (a checkpoint trained elsewhere records a ``--user-dir``
path that may not exist here)::

    from fairseq_attn_plugins.loading import load_model_ensemble_and_task, from_pretrained
    models, cfg, task = load_model_ensemble_and_task(["ck.pt"], arg_overrides={"data": "bin"})
    hub = from_pretrained("run_dir", "checkpoint_best.pt", "bin")   # .translate("...")

Nothing else changes: the same ``weights_only=True`` load (no ``weights_only=False``),
the same strict state-dict load, and ``arg_overrides`` checked like
``--model-overrides`` (:mod:`.integration.model_overrides`).
"""

import os
from typing import Any, Dict, List, Optional

from . import checkpoint_safety

PLUGIN_DIR = os.path.dirname(os.path.abspath(__file__))  # the package: --user-dir


def _with_user_dir(arg_overrides: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    overrides = dict(arg_overrides or {})
    overrides.setdefault("user_dir", PLUGIN_DIR)
    return overrides


def load_checkpoint_to_cpu(path: str, arg_overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """fairseq's ``checkpoint_utils.load_checkpoint_to_cpu`` (the state, upgraded, ``arg_overrides``
    applied to its configuration) with the checkpoint allowlist installed: pass it on as ``state=``
    to :func:`load_model_ensemble_and_task` to read the file once."""
    checkpoint_safety.install()
    from fairseq import checkpoint_utils

    return checkpoint_utils.load_checkpoint_to_cpu(path, arg_overrides=_with_user_dir(arg_overrides))


def load_model_ensemble_and_task(filenames: List[str], arg_overrides: Optional[Dict[str, Any]] = None,
                                 task=None, strict: bool = True, **kwargs):
    """fairseq's ``checkpoint_utils.load_model_ensemble_and_task`` with the checkpoint
    allowlist installed; returns ``(models, cfg, task)``."""
    checkpoint_safety.install()
    from fairseq import checkpoint_utils

    return checkpoint_utils.load_model_ensemble_and_task(
        list(filenames), arg_overrides=_with_user_dir(arg_overrides), task=task, strict=strict, **kwargs)


def load_model_ensemble(filenames: List[str], arg_overrides: Optional[Dict[str, Any]] = None,
                        task=None, strict: bool = True, **kwargs):
    """fairseq's ``checkpoint_utils.load_model_ensemble``; returns ``(models, cfg)``."""
    models, cfg, _ = load_model_ensemble_and_task(filenames, arg_overrides, task, strict, **kwargs)
    return models, cfg


def from_pretrained(model_name_or_path: str, checkpoint_file: str = "model.pt",
                    data_name_or_path: str = ".", **kwargs):
    """fairseq's hub interface (``TransformerModel.from_pretrained``) for a checkpoint of
    ours: returns a ``GeneratorHubInterface`` (``.translate``, ``.sample``, ``.models``).
    ``kwargs`` are fairseq's (``bpe=``, ``bpe_codes=``, ``beam=``, model overrides ...)."""
    checkpoint_safety.install()
    from fairseq.models.transformer import TransformerModel

    kwargs.setdefault("user_dir", PLUGIN_DIR)
    return TransformerModel.from_pretrained(model_name_or_path, checkpoint_file=checkpoint_file,
                                            data_name_or_path=data_name_or_path, **kwargs)
