"""Fine-tuning a stock (or other-piece) checkpoint into a model with new pieces.

Researchers start from released stock Transformer checkpoints. A stock checkpoint
restores into a piece without parameters (csan2d) as is, but a piece with parameters
(relpos tables, localsoft's predictors, chained's W_attn, dpi's tables) is missing from
it, and fairseq's strict load refuses it. ``--attn-init-new-params`` (with
``--finetune-from-model CK.pt`` or ``--restore-file CK.pt --reset-...``) loads it anyway:

* the missing parameters of the active pieces keep the values the model build gave them,
  i.e. the initialisation of a run trained from scratch with the same ``--seed``
  (fairseq builds the model after seeding, before it loads the checkpoint);
* each one is logged by name and shape;
* any other missing key, and any unexpected key, is still refused (one line naming them):
  the option never drops learned weights nor leaves a non-piece weight at its init. The one
  exception is ``embed_positions._float_tensor`` of a sinusoidal position table (a
  placeholder, no parameters) when the new model has no position embeddings
  (``--relpos-abs-pos drop``, dpi SAN+P): dropped with a log line.

The option acts only where fairseq-train restores a checkpoint (``Trainer.load_checkpoint``):
a checkpoint loaded for generation must hold every parameter, whatever the saved flag
says (a missing piece parameter there would translate with an untrained table).
Without the option, a checkpoint that lacks only piece parameters is refused with a
message naming them and the option.
"""

import contextlib
import contextvars
import functools
import logging
from typing import Dict, List, Tuple

import torch
from torch import nn

from fairseq_attn_core.piece import AttentionPiece, PieceConfigError

logger = logging.getLogger(__name__)

FLAG = "--attn-init-new-params"
_restoring = contextvars.ContextVar("attn_plugins_restoring_for_training", default=None)


def add_args(parser) -> None:
    parser.add_argument(
        FLAG, action="store_true",
        help="fine-tuning: when the checkpoint fairseq-train starts from (--finetune-from-model, "
             "--restore-file) lacks parameters of the active pieces (a stock transformer, another "
             "piece's model), keep them as initialised at training start and log each; any other "
             "missing or unexpected key is still refused")


def piece_keys(model: nn.Module) -> Dict[str, str]:
    """state-dict key -> piece name, for every parameter and buffer owned by a piece."""
    keys = {}
    # every path to each piece (remove_duplicate=False): a module registered under several names, as
    # a shared table may be, has its keys under each
    for prefix, module in model.named_modules(remove_duplicate=False):
        if isinstance(module, AttentionPiece):
            for name in module.state_dict():
                keys[f"{prefix}.{name}"] = module.name
    return keys


def _placeholder(key: str, model: nn.Module) -> bool:
    """A sinusoidal position table's parameter-free placeholder the model has no use for."""
    if not key.endswith("embed_positions._float_tensor"):
        return False
    side = key.split(".", 1)[0]
    return getattr(getattr(model, side, None), "embed_positions", 0) is None


def _shape(t) -> str:
    return "x".join(str(s) for s in t.shape)


def _plan(model, state: Dict[str, torch.Tensor]) -> Tuple[List[str], List[str], List[str], List[str]]:
    own = model.state_dict()
    owners = piece_keys(model)
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    new = [k for k in missing if k in owners]
    other_missing = [k for k in missing if k not in owners]
    dropped = [k for k in unexpected if _placeholder(k, model)]
    other_unexpected = [k for k in unexpected if k not in dropped]
    return new, other_missing, dropped, other_unexpected


def _short(keys: List[str], n: int = 6) -> str:
    return ", ".join(keys[:n]) + (f" (+{len(keys) - n} more)" if len(keys) > n else "")


def load_state_dict(model, state_dict, strict: bool, model_cfg, module_load):
    """fairseq's ``load_state_dict`` (upgrade, prune, ``nn.Module`` load) with the rules above.

    ``module_load`` is ``nn.Module.load_state_dict`` bound to ``model``."""
    from fairseq.checkpoint_utils import prune_state_dict

    model.upgrade_state_dict(state_dict)
    state = prune_state_dict(state_dict, model_cfg)
    if not strict:
        return module_load(state, strict=False)
    new, other_missing, dropped, other_unexpected = _plan(model, state)
    if not new or other_missing:
        return module_load(state, strict=True)  # complete, or broken beyond pieces: torch's message
    source = _restoring.get()
    args = getattr(model, "args", None)
    if source is None or not getattr(args, "attn_init_new_params", False):
        owners = piece_keys(model)
        pieces = sorted({owners[k] for k in new})
        where = ("pass --attn-init-new-params to fairseq-train to initialise them as at training start"
                 if source is not None else
                 "a checkpoint used for generation must hold them (was it trained with these pieces? "
                 "an override of attn_pieces cannot add a piece with parameters)")
        raise PieceConfigError(
            f"checkpoint lacks {len(new)} parameter(s) of the active piece(s) {pieces}: {_short(new)}; {where}")
    if other_unexpected:
        raise PieceConfigError(
            f"{FLAG}: checkpoint {source} holds {len(other_unexpected)} key(s) this model does not have: "
            f"{_short(other_unexpected)}; refusing to drop learned weights (fine-tune into a model that "
            f"keeps them, e.g. keep the checkpoint's pieces in --attn-pieces, or --relpos-abs-pos keep)")
    for k in dropped:
        logger.info(f"{FLAG}: not loading {k} from {source}: the sinusoidal position table has no "
                    f"parameters and this model has no position embeddings")
        del state[k]
    result = module_load(state, strict=False)
    assert sorted(result.missing_keys) == sorted(new) and not result.unexpected_keys, result
    owners = piece_keys(model)
    own = model.state_dict()
    seed = getattr(args, "seed", None)
    logger.info(f"{FLAG}: {source} lacks {len(new)} parameter(s) of the active pieces; they keep "
                f"their initialisation at training start (--seed {seed}):")
    for k in new:
        logger.info(f"{FLAG}:   {k} ({owners[k]}, {_shape(own[k])})")
    return result


@contextlib.contextmanager
def restoring_for_training(path):
    token = _restoring.set(str(path))
    try:
        yield
    finally:
        _restoring.reset(token)


def marked_trainer_load(load):
    """fairseq's ``Trainer.load_checkpoint`` marking its restores (:func:`restoring_for_training`)
    and showing the plugin's reason for a refused load (installed by :mod:`..integration.fixes`)."""

    @functools.wraps(load)
    def load_checkpoint(self, filename, *args, **kwargs):
        with restoring_for_training(filename):
            try:
                return load(self, filename, *args, **kwargs)
            except Exception as e:
                # fairseq replaces any load error by "please ensure that the architectures
                # match": show ours, which says what is missing and what to do
                if isinstance(e.__context__, PieceConfigError):
                    raise e.__context__ from None
                raise

    return load_checkpoint
