"""CTranslate2 export of ``transformer_attn`` checkpoints (exact architectures only).

CTranslate2's fairseq converter accepts stock architectures only. Its Transformer spec
expresses more than those, so this converter writes our models into it where the result
computes exactly what fairseq computes (same float32 arithmetic up to rounding):

* the baseline (no piece): fairseq's Transformer, post- or pre-norm, sinusoidal or learned
  positions, shared or separate embeddings;
* ``relpos`` (Shaw et al. 2018) in any mode, sides and layers: CTranslate2's
  ``relative_position_keys`` / ``relative_position_values`` are the same clipped tables
  (``clip(j - i, k) + k`` rows, shared by the heads, the key term scaled with the queries);
  ``kv`` writes both tables, ``k`` only the keys, ``tied`` the one table as both;
* ``temp``: the per-head scalars multiply the q/k/v projections, so they are folded into
  those projections' weight rows and biases;
* ``rope`` (Su et al. 2021): CTranslate2's rotary embeddings with ``rotary_interleave=True``,
  which pairs dimensions (2i, 2i+1) as our piece (RoFormer) does, not the halves (i, i + r/2)
  of GPT-NeoX / Hugging Face (``rotary_interleave=False``); ``rotary_dim`` = our rotated
  dimensions r (``--rope-fraction`` of the head, rounded down to even; frequencies
  ``base^(-2i/r)`` in both), ``rotary_base`` = ``--rope-theta``. Rotation before the 1/sqrt(d)
  query scaling in both (a linear map, so the order does not matter). Values not rotated.
* ``t5bias`` (Raffel et al. 2020): CTranslate2's ``relative_attention_bias``, the same (N, H)
  table and T5's bucket function (bidirectional in the encoder, causal in the decoder;
  N = the table's rows = ``--t5-buckets``, ``relative_attention_max_distance`` =
  ``--t5-max-distance``). Sharing: ``--t5-sharing stack`` writes the one table into every layer
  holding the piece (as CTranslate2's own T5 converter does; the saved model stores it once),
  ``layer`` each layer's own. Query scaling: T5 itself does not scale q.k (CTranslate2's T5
  converter sets ``queries_scale = 1``); our piece adds the bias to q.k / sqrt(d), which is
  CTranslate2's default scaling, so ``queries_scale`` is left unset.
* ``dropattn_c`` / ``dropattn_e``: identity at inference (training-only dropout).

``alibi`` is refused: CTranslate2 has ALiBi in decoders only (causal distances); our
encoder's symmetric penalty -m_h |i - j| has no counterpart, and decoder-only ALiBi (with
kept sinusoidal positions) is not exported.

Position embeddings: CTranslate2 adds absolute positions on a side exactly when that side's
first self-attention layer has no position method (relative positions, rotary embeddings or
a relative bias). So ``--<piece>-abs-pos drop`` (the default) needs the piece in layer 0 of
both sides (the default ``--<piece>-layers all``), and ``--<piece>-abs-pos keep`` needs layer 0
without it on each side that keeps positions (e.g. ``--relpos-layers 1-5``); other layouts
are refused.

Every other piece is refused in one line naming the piece and what CTranslate2 lacks; so
are fairseq options the spec does not cover (different encoder/decoder heads or
normalisation, adaptive softmax, ``decoder_input_dim != decoder_embed_dim``, ...).

The exported model translates like ``fairseq-generate`` when given the same BPE'd source
tokens (``</s>`` is appended to the source and starts the target, as in fairseq) and the
same beam, length penalty and maximum length (see ``benchmarks/ct2_export.py``).
"""

import logging
import os
from typing import List, Optional

import numpy as np
import torch
from fairseq_attn_records.output_files import replace_folder

logger = logging.getLogger(__name__)

#: pieces CTranslate2 represents exactly, with how
SUPPORTED = {
    "relpos": "relative_position_keys/values",
    "rope": "rotary embeddings, rotary_interleave=True (pairs 2i, 2i+1)",
    "t5bias": "relative_attention_bias (T5 buckets)",
    "temp": "folded into the q/k/v projections",
    "dropattn_c": "identity at inference",
    "dropattn_e": "identity at inference",
}

#: what CTranslate2's attention spec lacks for each other piece
WHY_NOT = {
    "alibi": "symmetric ALiBi for an encoder (its ALiBi is decoder-only, causal; decoder-only "
             "ALiBi with kept positions is not exported either)",
    "csan1d": "a local window mask on encoder self-attention (its sliding_window only bounds a decoder's cache)",
    "csan2d": "attention over a window of keys spanning adjacent heads",
    "disan": "per-head directional (forward/backward) masks",
    "chained": "powers of the attention matrix (P^k V) and the W_attn projection",
    "dpi": "learned absolute/relative position scalars on the first layer's logits (its "
           "relative_attention_bias is T5's bucketed bias)",
    "convattn1d": "a convolution over the attention probabilities",
    "convattn2d": "a convolution over the attention probabilities",
    "localsoft": "a Gaussian localness bias with a predicted centre and window",
    "localhard": "a Gaussian localness bias with a predicted centre",
    "neighbor": "a Gaussian bias with a learned width",
    "block": "block self-attention (intra/inter-block attention and a gate)",
    "cnns": "convolution sublayers before the self-attention",
}

_ACTIVATIONS = ("relu", "gelu", "gelu_accurate", "gelu_fast", "swish")


class ExportError(ValueError):
    """The model cannot be represented exactly by the target engine."""


def _pieces_of(attn) -> List:
    return list(getattr(attn, "pieces", []) or [])


def _piece(attn, name: str):
    for p in _pieces_of(attn):
        if p.name == name:
            return p
    return None


#: pieces that make CTranslate2 leave out the absolute positions when in a side's first layer
POSITION_PIECES = ("relpos", "rope", "t5bias")


def _position_piece(attn):
    for name in POSITION_PIECES:
        p = _piece(attn, name)
        if p is not None:
            return p
    return None


def unsupported_reason(model, args) -> Optional[str]:
    """Why CTranslate2 cannot represent ``model`` exactly (one line), or None."""
    active = sorted({p.name for m in model.modules() for p in _pieces_of(m)})
    for name in active:
        if name not in SUPPORTED:
            why = WHY_NOT.get(name, "counterpart for this piece")
            return (f"piece {name!r} cannot be exported to CTranslate2: its attention spec has no "
                    f"{why} (exportable: the baseline, {', '.join(sorted(SUPPORTED))})")
    checks = [
        (args.encoder_attention_heads == args.decoder_attention_heads,
         "--encoder-attention-heads and --decoder-attention-heads differ (one head count in the spec)"),
        (bool(args.encoder_normalize_before) == bool(args.decoder_normalize_before),
         "--encoder-normalize-before and --decoder-normalize-before differ"),
        (getattr(args, "activation_fn", "relu") in _ACTIVATIONS,
         f"--activation-fn {getattr(args, 'activation_fn', None)} has no CTranslate2 activation"),
        (not getattr(args, "adaptive_softmax_cutoff", None), "--adaptive-softmax-cutoff is not supported"),
        (getattr(args, "decoder_input_dim", args.decoder_embed_dim) == args.decoder_embed_dim
         and getattr(args, "decoder_output_dim", args.decoder_embed_dim) == args.decoder_embed_dim,
         "--decoder-input-dim/--decoder-output-dim differ from --decoder-embed-dim"),
        (not getattr(args, "layernorm_embedding", False), "--layernorm-embedding is not handled"),
        (not getattr(args, "no_cross_attention", False), "--no-cross-attention is not supported"),
        (not getattr(args, "cross_self_attention", False), "--cross-self-attention is not supported"),
    ]
    for ok, why in checks:
        if not ok:
            return f"cannot be exported to CTranslate2: {why}"
    for side in ("encoder", "decoder"):
        stack = getattr(model, side)
        first = _position_piece(stack.layers[0].self_attn)
        has_abs = stack.embed_positions is not None
        if has_abs and first is not None:
            prefix = {"relpos": "relpos", "rope": "rope", "t5bias": "t5"}[first.name]
            return (f"cannot be exported to CTranslate2: the {side} has absolute position embeddings and "
                    f"{first.name} in its first layer, but CTranslate2 drops absolute positions when the "
                    f"first layer has a position method (keep {first.name} off layer 0, e.g. "
                    f"--{prefix}-layers 1-5, or use --{prefix}-abs-pos drop)")
        if not has_abs and first is None:
            return (f"cannot be exported to CTranslate2: the {side} has no position embeddings and no "
                    f"position method in its first layer, where CTranslate2 would add sinusoidal ones")
    return None


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy().copy()


def _set_linear(spec, weight, bias=None) -> None:
    spec.weight = weight
    if bias is not None:
        spec.bias = bias


def _set_layer_norm(spec, module) -> None:
    spec.gamma = _np(module.weight)
    spec.beta = _np(module.bias)


def _temp_scales(attn):
    """Per-output-row multipliers of q, k, v (ones without ``temp``)."""
    C, H = attn.embed_dim, attn.num_heads
    scales = [torch.ones(C), torch.ones(C), torch.ones(C)]
    for p in _pieces_of(attn):
        if p.name == "temp":
            for i, tau in enumerate((p.tau_q, p.tau_k, p.tau_v)):
                scales[i] = scales[i] * tau.detach().float().repeat_interleave(C // H)
    return scales


def _proj(linear, scale):
    w = linear.weight.detach().float() * scale[:, None]
    b = None if linear.bias is None else linear.bias.detach().float() * scale
    return w, b


def _self_attention_spec(attn, attention_spec, model_spec):
    """The layer's self-attention spec (with the layer's position method, if any)."""
    rel, rope, t5 = _piece(attn, "relpos"), _piece(attn, "rope"), _piece(attn, "t5bias")
    rotary = {} if rope is None else {"rotary_dim": rope.rot, "rotary_interleave": True,
                                      "rotary_base": rope.theta}
    spec = attention_spec.MultiHeadAttentionSpec(self_attention=True, relative_position=rel is not None,
                                                 relative_attention_bias=t5 is not None, **rotary)
    sq, sk, sv = _temp_scales(attn)
    parts = [_proj(attn.q_proj, sq), _proj(attn.k_proj, sk), _proj(attn.v_proj, sv)]
    weight = torch.cat([w for w, _ in parts]).numpy()
    bias = None if any(b is None for _, b in parts) else torch.cat([b for _, b in parts]).numpy()
    _set_linear(spec.linear[0], weight, bias)
    _set_linear(spec.linear[1], _np(attn.out_proj.weight),
                None if attn.out_proj.bias is None else _np(attn.out_proj.bias))
    if rel is not None:
        spec.relative_position_keys = _np(rel.rel_keys)
        values = rel.value_table()
        spec.relative_position_values = model_spec.OPTIONAL if values is None else _np(values)
    if t5 is not None:
        spec.relative_attention_bias = _np(t5.table())  # (buckets, heads), as T5's embedding
        spec.relative_attention_max_distance = np.dtype("int32").type(t5.max_distance)
    return spec


def _set_cross_attention(spec, attn) -> None:
    _set_linear(spec.linear[0], _np(attn.q_proj.weight), _np(attn.q_proj.bias))
    kv_w = torch.cat([attn.k_proj.weight, attn.v_proj.weight]).detach().float().numpy()
    kv_b = torch.cat([attn.k_proj.bias, attn.v_proj.bias]).detach().float().numpy()
    _set_linear(spec.linear[1], kv_w, kv_b)
    _set_linear(spec.linear[2], _np(attn.out_proj.weight), _np(attn.out_proj.bias))


def _set_ffn(spec, layer) -> None:
    _set_layer_norm(spec.layer_norm, layer.final_layer_norm)
    _set_linear(spec.linear_0, _np(layer.fc1.weight), _np(layer.fc1.bias))
    _set_linear(spec.linear_1, _np(layer.fc2.weight), _np(layer.fc2.bias))


def _set_inputs(spec, stack) -> None:
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _np(stack.embed_tokens.weight)
    spec.scale_embeddings = float(stack.embed_scale)
    positions = stack.embed_positions
    if positions is None:  # the spec was built without (relative_position=True)
        return
    table = positions.weight if isinstance(positions, torch.nn.Embedding) else positions.weights
    # fairseq numbers the first token padding_idx + 1
    spec.position_encodings.encodings = _np(table[positions.padding_idx + 1:])


def _vocab(dictionary) -> List[str]:
    # CTranslate2 calls the padding token <blank>
    return ["<blank>" if s == "<pad>" else s for s in dictionary.symbols]


def build_spec(model, task, args):
    """The CTranslate2 ``TransformerSpec`` holding ``model``'s weights (refuses inexact ones)."""
    from ctranslate2.specs import attention_spec, common_spec, model_spec, transformer_spec

    reason = unsupported_reason(model, args)
    if reason:
        raise ExportError(reason)
    act = getattr(args, "activation_fn", "relu")
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                  "gelu_accurate": common_spec.Activation.GELUTanh,
                  "gelu_fast": common_spec.Activation.GELUTanh,
                  "swish": common_spec.Activation.SWISH}[act]
    pre_norm = bool(args.encoder_normalize_before)
    # relative_position=True only removes the absolute position table here: each layer's
    # self-attention spec is built below with or without its Shaw tables
    encoder = transformer_spec.TransformerEncoderSpec(
        len(model.encoder.layers), args.encoder_attention_heads, pre_norm=pre_norm,
        activation=activation, relative_position=model.encoder.embed_positions is None)
    decoder = transformer_spec.TransformerDecoderSpec(
        len(model.decoder.layers), args.decoder_attention_heads, pre_norm=pre_norm,
        activation=activation, relative_position=model.decoder.embed_positions is None)
    _set_inputs(encoder, model.encoder)
    _set_inputs(decoder, model.decoder)
    for layer_spec, layer in zip(encoder.layer, model.encoder.layers):
        layer_spec.self_attention = _self_attention_spec(layer.self_attn, attention_spec, model_spec)
        _set_layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
        _set_ffn(layer_spec.ffn, layer)
    for layer_spec, layer in zip(decoder.layer, model.decoder.layers):
        layer_spec.self_attention = _self_attention_spec(layer.self_attn, attention_spec, model_spec)
        _set_layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
        _set_cross_attention(layer_spec.attention, layer.encoder_attn)
        _set_layer_norm(layer_spec.attention.layer_norm, layer.encoder_attn_layer_norm)
        _set_ffn(layer_spec.ffn, layer)
    for spec, stack in ((encoder, model.encoder), (decoder, model.decoder)):
        if stack.layer_norm is not None:
            _set_layer_norm(spec.layer_norm, stack.layer_norm)
    _set_linear(decoder.projection, _np(model.decoder.output_projection.weight))
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.register_source_vocabulary(_vocab(task.source_dictionary))
    spec.register_target_vocabulary(_vocab(task.target_dictionary))
    spec.config.decoder_start_token = spec.config.eos_token  # fairseq starts the target with </s>
    spec.config.add_source_eos = True  # ... and ends the source with it
    return spec


def _converter_class():
    from ctranslate2.converters.converter import Converter

    class AttnPluginsConverter(Converter):
        """CTranslate2 converter for a ``transformer_attn`` (or stock transformer) checkpoint."""

        def __init__(self, checkpoint: str, data_dir: str):
            self.checkpoint, self.data_dir = checkpoint, data_dir

        def _load(self):
            from ..loading import load_model_ensemble_and_task

            models, cfg, task = load_model_ensemble_and_task([self.checkpoint],
                                                             arg_overrides={"data": self.data_dir})
            model = models[0].eval()
            with torch.no_grad():
                return build_spec(model, task, cfg.model)

    return AttnPluginsConverter


def export_ct2(data_dir: str, checkpoint: str, output_dir: str, quantization: Optional[str] = None,
               force: bool = False) -> str:
    """Write the CTranslate2 model of ``checkpoint`` (dictionaries from ``data_dir``) to
    ``output_dir`` (written to ``output_dir.tmp``, then renamed); returns ``output_dir``."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise ExportError("--to ct2 needs the ctranslate2 package: pip install ctranslate2") from None
    if os.path.exists(output_dir) and not force:
        raise ExportError(f"{output_dir} exists; pass --force to replace it")
    tmp = output_dir.rstrip("/") + ".tmp"
    _converter_class()(checkpoint, data_dir).convert(tmp, quantization=quantization, force=True)
    replace_folder(tmp, output_dir)
    return output_dir
