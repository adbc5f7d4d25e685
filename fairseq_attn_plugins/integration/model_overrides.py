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

A key that names nothing (``{'csan_windw': 5}``) is refused with the nearest known names, as
fairseq-train and the hydra yaml refuse it: fairseq would set it on the checkpoint's model
namespace, where nothing reads it. Known are the checkpoint's own configuration keys (its
model's flags included), the plugin's flags and every field of fairseq's configuration
dataclasses (common, generation, the bpe / tokenizer / task / model choices...), which the
hub's ``from_pretrained`` passes through the same overrides (``bpe_codes=...``).
"""

import argparse
import contextvars
import dataclasses
import difflib
import functools

from fairseq_attn_core.flags import check_inactive_flags, piece_flags
from fairseq_attn_core.piece import PIECES, PieceConfigError
from ..models import is_attn_arch

#: shared attention flags (not owned by a piece)
SHARED_FLAGS = ("attn_pieces", "attn_backend", "attn_flex_compile")
#: keys fairseq's hub ``from_pretrained`` reads from its overrides itself
HUB_KEYS = ("is_vocoder", "generation_args")


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


@functools.lru_cache(maxsize=None)
def fairseq_config_names() -> frozenset:
    """Every field of fairseq's configuration dataclasses: the sections of ``FairseqConfig``
    and each registered choice (models, tasks, criterions, optimizers, bpe, tokenizers...)."""
    from fairseq.dataclass.configs import FairseqConfig
    from fairseq.models import MODEL_DATACLASS_REGISTRY
    from fairseq.registry import REGISTRIES
    from fairseq.tasks import TASK_DATACLASS_REGISTRY

    classes = [f.type for f in dataclasses.fields(FairseqConfig) if dataclasses.is_dataclass(f.type)]
    classes += list(MODEL_DATACLASS_REGISTRY.values()) + list(TASK_DATACLASS_REGISTRY.values())
    for reg in REGISTRIES.values():
        classes += list(reg["dataclass_registry"].values())
    names = {f.name for c in classes if dataclasses.is_dataclass(c) for f in dataclasses.fields(c)}
    return frozenset(names | {f.name for f in dataclasses.fields(FairseqConfig)})


def _config_names(node) -> set:
    """The keys of a checkpoint's configuration, every section and the model namespace."""
    if isinstance(node, argparse.Namespace):
        return set(vars(node))
    names = set()
    try:
        keys = list(node.keys())
    except (AttributeError, TypeError):
        return names
    for k in keys:
        names.add(k)
        try:
            names |= _config_names(node[k])
        except Exception:  # a mandatory ('???') value
            continue
    return names


def check_known(path, cfg, overrides) -> None:
    """Refuse an override key that names no flag (a typo), with the nearest known names; ``cfg``:
    the checkpoint's configuration before the overrides are written over it."""
    known = _config_names(cfg) | set(fairseq_config_names()) | set(piece_flags()) | set(SHARED_FLAGS)
    known |= set(HUB_KEYS)
    for key in overrides:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=3)
            raise PieceConfigError(
                f"{path}: override '{key}' is not a flag of this checkpoint's model or of fairseq"
                + (f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else "")
                + "; overrides are flags without '--' and with '_' for '-', e.g. {'csan_window': 5}")


def check_overrides(path, state, overrides) -> None:
    """Refuse overrides of attention flags that would be ignored; record the rest."""
    ns = _model_namespace(state)
    if ns is None or not overrides:
        return
    owners = piece_flags()
    given = [k for k in overrides if k in owners or k in SHARED_FLAGS]
    if not is_attn_arch(getattr(ns, "arch", None)):
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


#: the checkpoint being read with overrides (for the check of their names, made where fairseq
#: writes them over the checkpoint's configuration, which still holds only its own keys there)
_reading = contextvars.ContextVar("attn_plugins_overrides_path", default=None)


def checked_loader(load):
    """fairseq's ``load_checkpoint_to_cpu`` checking its ``arg_overrides`` (installed by :mod:`.fixes`)."""

    @functools.wraps(load)
    def load_checkpoint_to_cpu(path, arg_overrides=None, *args, **kwargs):
        token = _reading.set(path)
        try:
            state = load(path, arg_overrides, *args, **kwargs)
        finally:
            _reading.reset(token)
        if arg_overrides is not None:
            check_overrides(path, state, arg_overrides)
        return state

    return load_checkpoint_to_cpu


def known_names_only(overwrite):
    """fairseq's ``overwrite_args_by_name`` refusing override keys that name nothing, while
    :func:`checked_loader` reads a checkpoint (installed by :mod:`.fixes`)."""

    @functools.wraps(overwrite)
    def overwrite_args_by_name(cfg, overrides):
        path = _reading.get()
        if path is not None and overrides:
            check_known(path, cfg, overrides)
        return overwrite(cfg, overrides)

    return overwrite_args_by_name
