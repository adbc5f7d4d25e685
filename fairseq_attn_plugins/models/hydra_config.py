"""The model's fairseq dataclass config, for ``fairseq-hydra-train``.

A yaml's ``model:`` section reaches a legacy (argparse) architecture as an omegaconf
``DictConfig`` holding only the keys the yaml gives. fairseq then runs the architecture
function on it and builds the model through ``TransformerConfig.from_namespace``, which
copies the extra keys of an argparse ``Namespace`` but not those of a ``DictConfig``: the
piece flags were lost (``AttributeError: invalid argument attn_pieces``).

:func:`model_config_class` is a ``FairseqDataclass`` with one field per model flag
(``AttnTransformerModel.add_args``): fairseq's Transformer flags and, derived from the piece
declarations, ``--attn-pieces``, ``--attn-backend`` and every piece setting. Every field defaults to ``None`` = not given,
so that the architecture sets the default, exactly as on the command line (fairseq's model
flags have no argparse defaults either). :func:`namespace_from_config` checks a yaml's
model section against its fields (an unknown key or a value of the wrong type is refused,
naming the key) and turns it into the ``Namespace`` the command line would give; the
architecture functions and ``build_model`` then run the same code on both, and write the
finished configuration back into the ``DictConfig`` that fairseq saves in checkpoints.

The dataclass is deliberately not put in fairseq's ``MODEL_DATACLASS_REGISTRY``: fairseq
would then merge it into the argparse path too (``add_defaults``), and its ``None``
defaults would hide the architectures' defaults in fairseq's own architecture functions.
"""

import argparse
import dataclasses
import difflib
import functools
from typing import Any, Optional

from fairseq.dataclass import FairseqDataclass
from omegaconf import OmegaConf, open_dict

from fairseq_attn_core import PieceConfigError

# keys a finished configuration holds besides the flags (a checkpoint's model section)
_EXTRA_FIELDS = {
    "arch": (str, "the architecture (fairseq's --arch; the yaml's model._name)"),
    "attn_explicit_flags": (str, "piece flags that the configuration set itself, recorded by the "
                                 "architecture function (flags of inactive pieces are refused)"),
    "decoder_input_dim": (int, "set by fairseq's Transformer architectures (decoder_embed_dim)"),
}


def _field_type(action) -> type:
    if action.nargs == 0:  # store_true / store_false
        return bool
    return action.type if action.type in (int, float, str) else Any


@functools.lru_cache(maxsize=None)
def model_config_class(model_cls):
    """``TransformerAttnConfig``: one ``Optional`` field per flag that ``model_cls.add_args``
    declares (fairseq's Transformer flags, the attention flags, every piece setting), default
    ``None`` (= not given: the architecture decides). Built on first use, when every piece is
    registered."""
    parser = argparse.ArgumentParser(add_help=False)
    model_cls.add_args(parser)
    specs = {a.dest: (_field_type(a), a.help or "") for a in parser._actions}
    specs.update({k: v for k, v in _EXTRA_FIELDS.items() if k not in specs})
    fields = [
        (name, Optional[typ], dataclasses.field(default=None, metadata={"help": help, "type": typ}))
        for name, (typ, help) in sorted(specs.items())
    ]
    return dataclasses.make_dataclass("TransformerAttnConfig", fields, bases=(FairseqDataclass,))


def is_config(args) -> bool:
    return OmegaConf.is_config(args)


def _convert(key: str, value, typ):
    """``value`` of the yaml key ``model.<key>`` as the flag's type; raises naming the key."""
    if typ is Any or value is None:
        return value
    if typ is bool:
        ok = isinstance(value, bool) or str(value).lower() in ("true", "false")
        converted = value if isinstance(value, bool) else str(value).lower() == "true"
    elif isinstance(value, bool) or isinstance(value, (list, dict)):
        ok, converted = False, None
    else:
        try:
            converted = typ(value)
            ok = typ is not int or float(value) == converted  # 1.5 is no integer
        except (TypeError, ValueError):
            ok, converted = False, None
    if not ok:
        raise PieceConfigError(f"model.{key}: {value!r} is not a valid {typ.__name__} "
                               f"(the type of --{key.replace('_', '-')})")
    return converted


def namespace_from_config(cfg, model_cls) -> argparse.Namespace:
    """The yaml's model section as the command line's ``Namespace``: keys checked against
    the fields of :func:`model_config_class` and converted to their types (``csan_layers: 0``
    -> ``'0'``), values left ``None`` dropped (= not given), ``arch`` taken from ``_name``.
    A finished configuration (a checkpoint's, holding the architecture function's record
    ``attn_explicit_flags``) is taken as it is: it may hold keys that are no flags."""
    fields = model_config_class(model_cls).__dataclass_fields__
    finished = cfg.get("attn_explicit_flags", None) is not None
    values = {}
    for key, value in OmegaConf.to_container(cfg, resolve=True).items():
        if key.startswith("_") or value is None:
            continue
        if key not in fields and finished:
            values[key] = value
            continue
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=3)
            raise PieceConfigError(
                f"model.{key}: not a flag of the transformer_attn model"
                + (f" (did you mean {', '.join(close)}?)" if close else "")
                + "; expected the command-line flag without '--' and with '_' for '-', "
                  "e.g. model.csan_window: 5"
            )
        values[key] = _convert(key, value, fields[key].metadata["type"])
    name = cfg.get("_name", None)
    if name is not None:
        values.setdefault("arch", name)
    return argparse.Namespace(**values)


def write_back(cfg, args: argparse.Namespace) -> None:
    """Store every value of ``args`` in the ``DictConfig`` ``cfg`` (what a checkpoint saves)."""
    with open_dict(cfg):
        for key, value in vars(args).items():
            if cfg.get(key, None) != value:
                cfg[key] = value
