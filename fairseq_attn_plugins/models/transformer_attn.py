"""The ``transformer_attn`` model: fairseq's Transformer whose self-attention
layers are :class:`~.self_attention.PluginSelfAttention` (the core's
:class:`fairseq_attn_core.SelfAttention` as a fairseq layer).

With no piece active it is the stock Transformer (same parameters, same names,
same outputs), so every comparison runs through the same code. Encoder-decoder
attention is fairseq's own.

Architectures are named ``transformer_<variant>_wmt_en_de`` (base) and
``transformer_<variant>_vaswani_wmt_en_de_big`` (big); each only sets defaults
on top of fairseq's matching architecture.
"""

import argparse
import functools
import logging
import weakref
from typing import List

import numpy as np
from fairseq import utils
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig
from fairseq.models.transformer.transformer_decoder import TransformerDecoder
from fairseq.models.transformer.transformer_encoder import TransformerEncoder
from fairseq.models.transformer.transformer_legacy import (
    TransformerModel,
    transformer_vaswani_wmt_en_de_big,
    transformer_wmt_en_de,
)
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from torch import nn

from fairseq_attn_core import (
    PIECES,
    AttentionPiece,
    AttentionSite,
    PieceConfigError,
    add_attention_args,
    attention_defaults,
    build_pieces,
    validate_attention_args,
)
from fairseq_attn_core.flags import explicit_summary, pieces_summary, record_explicit_flags
from . import finetune
from .hydra_config import is_config, namespace_from_config, write_back
from .self_attention import PluginSelfAttention

logger = logging.getLogger(__name__)


def _build_self_attention(args, side, layer_idx, embed_dim, num_heads, num_layers, cfg, q_noise, qn_block_size):
    site = AttentionSite(side=side, layer_idx=layer_idx, num_layers=num_layers,
                         num_heads=num_heads, head_dim=embed_dim // num_heads)
    return PluginSelfAttention(
        embed_dim, num_heads, site,
        pieces=build_pieces(args, site),
        dropout=cfg.attention_dropout,
        backend=args.attn_backend,
        flex_compile=args.attn_flex_compile,
        q_noise=q_noise,
        qn_block_size=qn_block_size,
    )


def _wrap_layer(layer, cfg):
    """The checkpointing / FSDP wrapping fairseq applies to its own layers."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)


class PluginEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer with the plugin self-attention at ``layer_idx``."""

    def __init__(self, cfg, args, layer_idx, return_fc=False):
        # read by build_self_attention, which the parent constructor calls
        object.__setattr__(self, "_plugin_args", (args, layer_idx))
        super().__init__(cfg, return_fc=return_fc)

    def build_self_attention(self, embed_dim, cfg):
        args, layer_idx = self._plugin_args
        return _build_self_attention(
            args, "encoder", layer_idx, embed_dim, cfg.encoder.attention_heads,
            cfg.encoder.layers, cfg, self.quant_noise, self.quant_noise_block_size,
        )

    def forward(self, x, encoder_padding_mask, attn_mask=None):
        # pieces may transform the layer input first (Cnns: convolution sublayers)
        x = self.self_attn.layer_input(x, encoder_padding_mask)
        return super().forward(x, encoder_padding_mask, attn_mask)


class PluginDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer with the plugin self-attention at ``layer_idx``."""

    def __init__(self, cfg, args, layer_idx, no_encoder_attn=False):
        object.__setattr__(self, "_plugin_args", (args, layer_idx))
        super().__init__(cfg, no_encoder_attn=no_encoder_attn)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if cfg.cross_self_attention or add_bias_kv or add_zero_attn:
            raise PieceConfigError(
                "--cross-self-attention (and add_bias_kv/add_zero_attn) are not supported by "
                "transformer_attn models"
            )
        args, layer_idx = self._plugin_args
        attn = _build_self_attention(
            args, "decoder", layer_idx, embed_dim, cfg.decoder.attention_heads,
            cfg.decoder.layers, cfg, self.quant_noise, self.quant_noise_block_size,
        )
        transforming = [p.name for p in attn.pieces
                        if type(p).layer_input is not AttentionPiece.layer_input]
        if transforming:
            raise PieceConfigError(f"pieces {transforming} transform the layer input (layer_input), "
                                   f"which only encoder layers support")
        return attn


def _next_index(module) -> int:
    """fairseq builds layers in order without passing the index: count them."""
    idx = module.__dict__.get("_plugin_layer_count", 0)
    module.__dict__["_plugin_layer_count"] = idx + 1
    return idx


class PluginTransformerEncoder(TransformerEncoder):
    def build_encoder_layer(self, args):
        cfg = TransformerConfig.from_namespace(args)
        layer = PluginEncoderLayer(cfg, args, _next_index(self), return_fc=self.return_fc)
        return _wrap_layer(layer, cfg)


class PluginTransformerDecoder(TransformerDecoder):
    def build_decoder_layer(self, args, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(args)
        layer = PluginDecoderLayer(cfg, args, _next_index(self), no_encoder_attn=no_encoder_attn)
        return _wrap_layer(layer, cfg)


@register_model("transformer_attn")
class AttnTransformerModel(TransformerModel):
    """Transformer whose self-attention is built from composable pieces (``--attn-pieces``)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_attention_args(parser)
        finetune.add_args(parser)

    @staticmethod
    def complete_args(args):
        """The defaults of anything still missing, then every check of the flags (pieces, their
        values, the backend): PieceConfigError naming the flag."""
        transformer_wmt_en_de(args)  # fairseq's base defaults for anything still missing
        attention_defaults(args)
        if getattr(args, "encoder_layers_to_keep", None) or getattr(args, "decoder_layers_to_keep", None):
            raise PieceConfigError("--encoder/decoder-layers-to-keep would renumber the layers "
                                   "that pieces are assigned to; not supported")
        validate_attention_args(args, fairseq_namespace=True)

    @classmethod
    def check_args(cls, args):
        """The checks :meth:`build_model` makes, on a copy of ``args`` (a parsed command line):
        run before anything is written, so that a refused flag leaves nothing behind."""
        cls.complete_args(argparse.Namespace(**vars(args)))

    @classmethod
    def build_model(cls, args, task):
        if is_config(args):  # fairseq-hydra-train (or its checkpoint): build from the Namespace
            namespace = namespace_from_config(args, cls)
            model = cls.build_model(namespace, task)
            write_back(args, namespace)
            return model
        cls.complete_args(args)
        model = super().build_model(args, task)
        attns = [m for m in model.modules() if isinstance(m, PluginSelfAttention)]
        logger.info(f"attention pieces per layer (--attn-pieces {args.attn_pieces!r}): "
                    f"{pieces_summary(attns)}")
        explicit = explicit_summary(attns)
        if explicit:
            logger.info(f"explicit attention path (probabilities materialised): {explicit}")
        if not getattr(args, "disable_validation", False) and hasattr(task, "datasets"):
            model.__dict__["_validation_check"] = (weakref.ref(task), args)
        return model

    def __getstate__(self):
        """Pickling (``torch.save(model)``, deepcopy) leaves out the weak reference to the task
        that the validation-length check holds until its first call."""
        state = super().__getstate__()
        if "_validation_check" in state:
            state = dict(state)
            del state["_validation_check"]
        return state

    def max_positions(self):
        """fairseq's limits (lowered by pieces with position tables: convattn1d, dpi).

        fairseq-train skips longer training pairs with its 'invalid sizes' warning, but
        checks the validation sets only when it first validates (after an epoch of work).
        fairseq-train asks for these limits when it builds the training iterator, after
        loading the validation sets: the first such call refuses there and then a
        validation pair longer than the limits, unless --skip-invalid-size-inputs-valid-test.
        """
        limits = super().max_positions()
        check = self.__dict__.get("_validation_check")
        if check is not None:
            task, args = check[0](), check[1]
            if task is None or refuse_long_validation(task, args, limits):
                del self.__dict__["_validation_check"]
        return limits

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """fairseq's load; a checkpoint lacking only new pieces' parameters: see finetune."""
        if model_cfg is None and args is not None:
            return super().load_state_dict(state_dict, strict, model_cfg, args)
        return finetune.load_state_dict(self, state_dict, strict, model_cfg,
                                        functools.partial(nn.Module.load_state_dict, self))

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return PluginTransformerEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return PluginTransformerDecoder(
            args, tgt_dict, embed_tokens,
            no_encoder_attn=getattr(args, "no_cross_attention", False),
        )


def refuse_long_validation(task, args, limits) -> bool:
    """Raise if a loaded validation set holds a pair longer than ``limits`` (and
    --skip-invalid-size-inputs-valid-test is not given). Returns True once every
    validation subset was found loaded and checked."""
    subsets = [s.strip() for s in str(getattr(args, "valid_subset", "valid")).split(",") if s.strip()]
    loaded = [s for s in subsets if s in task.datasets]
    if len(loaded) < len(subsets):
        return False
    if getattr(args, "skip_invalid_size_inputs_valid_test", False):
        return True
    max_positions = utils.resolve_max_positions(task.max_positions(), limits)
    for subset in loaded:
        dataset = task.datasets[subset]
        if not hasattr(dataset, "filter_indices_by_size"):
            continue
        _, ignored = dataset.filter_indices_by_size(np.arange(len(dataset)), max_positions)
        if len(ignored):
            raise ValueError(
                f"validation set {subset!r}: {len(ignored)} sentence pair(s) are longer than this "
                f"model accepts (max_positions={max_positions}; e.g. pair #{ignored[0]} has sizes "
                f"{dataset.size(ignored[0])}); refusing before training instead of failing at the "
                f"first validation. Pass --skip-invalid-size-inputs-valid-test to skip them, or raise "
                f"the limit (--max-source-positions / --max-target-positions, --convattn-max-len, "
                f"--dpi-max-len)")
    return True


# ---------------------------------------------------------------------------
# Architectures. Each variant: base (512/2048/8 heads, 6+6) and big.
# ---------------------------------------------------------------------------
def register_variant(variant: str, pieces: str, preset=None):
    """Register ``transformer_<variant>_wmt_en_de`` and ``..._vaswani_wmt_en_de_big``:
    ``--attn-pieces pieces`` and the flag defaults of ``preset`` (explicit flags win)."""
    preset = dict(preset or {})

    def make(base_fn):
        def arch(args):
            if is_config(args):  # a yaml's model section: the command line's Namespace
                namespace = namespace_from_config(args, AttnTransformerModel)
                arch(namespace)
                write_back(args, namespace)
                return
            record_explicit_flags(args)  # before any default: what the user set
            args.attn_pieces = getattr(args, "attn_pieces", pieces)
            for attr, value in preset.items():
                setattr(args, attr, getattr(args, attr, value))
            base_fn(args)
            attention_defaults(args)

        return arch

    names = []
    for suffix, base_fn in (("wmt_en_de", transformer_wmt_en_de),
                            ("vaswani_wmt_en_de_big", transformer_vaswani_wmt_en_de_big)):
        name = f"transformer_{variant}_{suffix}"
        register_model_architecture("transformer_attn", name)(make(base_fn))
        names.append(name)
    return names


# the plugin's baseline (no piece active), then one variant per registered piece and one
# per named preset a piece declares (``architectures``: dpi_sanp, dpi_sanpr, bidirect, ...)
ARCHITECTURES = register_variant("attn", "")
for _name, _cls in PIECES.items():
    ARCHITECTURES += register_variant(_name, _name)
    for _variant, _preset in _cls.architectures.items():
        ARCHITECTURES += register_variant(_variant, _name, _preset)


def is_attn_arch(arch) -> bool:
    """Whether ``arch`` is a registered architecture of this model: the one answer to "is this
    architecture ours?" (a stock fairseq architecture, an unknown name or None is not)."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    cls = ARCH_MODEL_REGISTRY.get(arch) if isinstance(arch, str) else None
    return cls is not None and issubclass(cls, AttnTransformerModel)


def attn_architectures() -> List[str]:
    """Every registered architecture of this model, sorted."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    return sorted(a for a in ARCH_MODEL_REGISTRY if is_attn_arch(a))
