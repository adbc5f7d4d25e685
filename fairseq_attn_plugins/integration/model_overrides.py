"""``--model-overrides`` (and the hub's / loaders' ``arg_overrides``) checked like training flags.

At generate / interactive / validate time fairseq builds the model from the checkpoint's
saved configuration with the overrides written over it. Without a check, a flag of a
piece the checkpoint does not run (``{'csan_window': 5}`` on a relpos checkpoint) would
be ignored silently, and the training command line's record of explicit flags would be
checked against overridden pieces (``{'attn_pieces': ''}`` on a csan2d checkpoint refused
for a ``--csan-heads`` the user gave at training, not now).

So when a checkpoint is read with overrides, the rule of training applies to the
overrides themselves: a piece flag among them whose piece is not active (after the
overrides) is refused, naming it; an attention flag overridden on a checkpoint that is
not a ``transformer_attn`` model is refused too. The overrides become the load's record
of explicit flags (the saved training record described the training command line),
so the model build checks exactly them. Values are then validated by the model build
as at training (an even ``csan_window`` is refused there).
"""

import argparse
import functools

from ..attention.flags import check_inactive_flags, piece_flags
from ..attention.piece import PIECES, PieceConfigError

#: shared attention flags (not owned by a piece)
SHARED_FLAGS = ("attn_pieces", "attn_backend")

_installed = False


def _model_namespace(state):
    """The checkpoint's model configuration (a Namespace for legacy models), or None."""
    cfg = state.get("cfg") if isinstance(state, dict) else None
    model = None
    if cfg is not None:
        try:
            model = cfg["model"]
        except (KeyError, TypeError):
            model = None
    if not isinstance(model, argparse.Namespace):
        model = state.get("args") if isinstance(state, dict) else None
    return model if isinstance(model, argparse.Namespace) else None


def _is_attn_model(ns) -> bool:
    from fairseq.models import ARCH_MODEL_REGISTRY

    from ..models.transformer_attn import AttnTransformerModel

    cls = ARCH_MODEL_REGISTRY.get(getattr(ns, "arch", None))
    return cls is not None and issubclass(cls, AttnTransformerModel)


def check_overrides(path, state, overrides) -> None:
    """Refuse overrides of attention flags that would be ignored; record the rest."""
    ns = _model_namespace(state)
    if ns is None or not overrides:
        return
    owners = piece_flags()
    given = [k for k in overrides if k in owners or k in SHARED_FLAGS]
    if not _is_attn_model(ns):
        if given:
            raise PieceConfigError(
                f"{path}: overrides {given} set attention-plugin flags, but the checkpoint's model is "
                f"--arch {getattr(ns, 'arch', '?')}, not a transformer_attn architecture: they would "
                f"have no effect; drop them")
        return
    piece_keys = [k for k in given if k in owners]
    names = [n.strip() for n in str(getattr(ns, "attn_pieces", "") or "").split(",") if n.strip()]
    probe = argparse.Namespace(attn_explicit_flags=",".join(piece_keys), attn_pieces=ns.attn_pieces,
                               arch=getattr(ns, "arch", None))
    try:
        check_inactive_flags(probe, [n for n in names if n in PIECES])
    except PieceConfigError as e:
        shown = {k: overrides[k] for k in given}
        raise PieceConfigError(
            f"{path} with overrides {shown}: {e} (as overrides, flags are written by their names: "
            f"{{'attn_pieces': ...}}, {{'csan_window': ...}})") from None
    # the build's check of explicit flags now sees this load's overrides, not the training record
    ns.attn_explicit_flags = ",".join(piece_keys)


def _wrap(load):
    @functools.wraps(load)
    def load_checkpoint_to_cpu(path, arg_overrides=None, *args, **kwargs):
        state = load(path, arg_overrides, *args, **kwargs)
        if arg_overrides is not None:
            check_overrides(path, state, arg_overrides)
        return state

    load_checkpoint_to_cpu._attn_plugins_overrides = True
    return load_checkpoint_to_cpu


def install() -> None:
    """Check overrides wherever fairseq reads a checkpoint with them (generate,
    interactive, validate, hub, ``load_model_ensemble_and_task``)."""
    global _installed
    if _installed:
        return
    from fairseq import checkpoint_utils

    load = checkpoint_utils.load_checkpoint_to_cpu
    if not getattr(load, "_attn_plugins_overrides", False):
        checkpoint_utils.load_checkpoint_to_cpu = _wrap(load)
    _installed = True
