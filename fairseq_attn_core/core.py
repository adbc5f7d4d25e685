"""The one multi-head self-attention core that every variant plugs into.

``SelfAttention`` is a plain torch module (no fairseq import) whose parameters
(``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``), their initialisation (the same
draws of the random generator) and incremental-decoding cache layout are those of
fairseq's ``MultiheadAttention`` for self-attention: a stock ``transformer`` state
dict loads into it unchanged, and the fairseq plugin's ``PluginSelfAttention``
(:mod:`fairseq_attn_plugins.models.self_attention`) adds only fairseq's dropout
module, quant noise and the upgrade of its oldest checkpoints. It computes::

    softmax(scale * q k^T + biases, masked) @ v  (+ value-side terms)

with the pieces (see :mod:`.piece`) filling the hooks. The core projects q, k, v (and
keeps the decoding cache), asks the chooser (:mod:`.backends`) for the path that runs the
call, lets that path compute the heads' output (each path runs the hooks it supports),
and applies the output projection, the pieces' ``output_term`` and the widening piece's
``fold_weights``. Rows a piece's mask empties output zero for that head, never NaN
(:mod:`.scores`). Shapes follow fairseq: input ``(T, B, C)``, ``key_padding_mask``
``(B, S)`` with True = pad.
"""

import dataclasses
import math
import uuid
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from . import backends
from .backends import BACKENDS  # noqa: F401  (re-exported)
from .piece import AttentionContext, AttentionPiece, AttentionSite, check_one_widener


class AttentionDropout(nn.Module):
    """The rate of dropout on the attention probabilities, which the path running a call
    applies: ``p``, and ``apply_during_inference`` (False: only in training), the two
    attributes of fairseq's ``FairseqDropout`` that the core reads (the fairseq plugin puts
    that module here instead, so ``--retain-dropout`` reaches it). No parameters."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p
        self.apply_during_inference = False


class SelfAttention(nn.Module):
    """Multi-head self-attention with pieces in its hooks; input ``(T, B, C)``. See module docstring."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        site: AttentionSite,
        pieces: List[AttentionPiece] = (),
        dropout: float = 0.0,
        backend: str = "auto",
        flex_compile: str = "auto",
        policy: backends.Policy = backends.DEFAULT,
    ):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.dropout_module = AttentionDropout(dropout)
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        if (site.num_heads, site.head_dim) != (num_heads, self.head_dim):
            raise ValueError(f"SelfAttention({embed_dim}, {num_heads}): the site says num_heads="
                             f"{site.num_heads}, head_dim={site.head_dim}; expected num_heads={num_heads}, "
                             f"head_dim={self.head_dim} (embed_dim / num_heads), which the pieces are built for")
        self.scaling = self.head_dim ** -0.5
        self.self_attention = True
        self.encoder_decoder_attention = False
        # fairseq's MultiheadAttention order (k, v, q, out) and initialisation: the same draws
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.beam_size = 1
        self.reset_parameters()
        self._incremental_state_id = str(uuid.uuid4())  # the key of this layer's decoding cache
        self.site = site
        self.layer_idx = site.layer_idx
        self.pieces = nn.ModuleList(pieces)
        check_one_widener(pieces)
        self._no_incremental = [p.name for p in pieces if not p.incremental_ok]
        bands = [p.band_half for p in pieces if p.band_half is not None]
        self._layer = backends.Layer(
            backend="auto",
            pieces=tuple(p.name for p in pieces),
            needs_probs=tuple(p.name for p in pieces if not p.runs_fused),
            distance=backends.distance_form(pieces),
            band_half=min(bands) if bands else None,
            policy=policy,
        )
        self.backend = backend
        self.flex_compile = flex_compile
        #: what the last call ran: its path's name and the query blocks of its kernel
        #: (``None``: one call), for diagnostics and the tests
        self.last_run: Optional[Tuple[str, Optional[int]]] = None
        #: ``--attn-backend tuned``: shape class -> (path name, ``"run"``, ``"cache"`` or
        #: ``"timed"``), this layer's choices so far (:mod:`.backends.tuning`)
        self.tuned_choices: Dict[str, Tuple[str, str]] = {}

    @property
    def backend(self) -> str:
        return self._layer.backend

    @backend.setter
    def backend(self, backend: str) -> None:
        """``--attn-backend``; refused here (at model build) when it cannot run this layer."""
        layer = dataclasses.replace(self._layer, backend=backend)
        backends.check_layer(layer, self.head_dim, self.dropout_module.p)
        self._layer = layer

    def reset_parameters(self) -> None:
        """fairseq's: Xavier-uniform projections (q, k, v with gain 1/sqrt(2)), zero output bias."""
        for proj in (self.k_proj, self.v_proj, self.q_proj):
            nn.init.xavier_uniform_(proj.weight, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.constant_(self.out_proj.bias, 0.0)

    @property
    def policy(self) -> backends.Policy:
        """The thresholds and block sizes of this layer's paths (:mod:`.backends.policy`)."""
        return self._layer.policy

    @policy.setter
    def policy(self, policy: backends.Policy) -> None:
        self._layer = dataclasses.replace(self._layer, policy=policy)

    def upgrade_state_dict_named(self, state_dict, name):
        """Drop the second copy of a piece's parameters that checkpoints of earlier versions
        hold (``_flex_piece.*``, ``_expander.*``: the same tensors as ``pieces.0.*``,
        registered twice). fairseq's model calls this on loading."""
        prefix = f"{name}." if name else ""
        for alias in ("_flex_piece.", "_expander."):
            for key in [k for k in state_dict if k.startswith(prefix + alias)]:
                del state_dict[key]

    @property
    def _flex_piece(self) -> Optional[AttentionPiece]:
        """The layer's only piece when it computes the whole attention through flex_attention."""
        form = self._layer.distance
        return self.pieces[0] if form is not None and form.flex else None

    def extra_repr(self) -> str:
        names = ",".join(p.name for p in self.pieces) or "none"
        return f"{self.site.side} layer {self.layer_idx}, pieces={names}, backend={self.backend}"

    def path_for(self, call: backends.Call) -> backends.Path:
        """The path that runs ``call`` (see :mod:`.backends`)."""
        return backends.choose(self._layer, call)

    def why_explicit(self) -> Optional[str]:
        """Why this layer's training calls run the explicit path (``None``: they do not)."""
        return backends.why_explicit(self._layer)

    @property
    def fused_ok(self) -> bool:
        """Every piece of the layer runs without the probability matrix."""
        return not self._layer.needs_probs

    # ------------------------------------------------------------------
    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if before_softmax or static_kv:
            raise NotImplementedError("SelfAttention supports neither before_softmax nor static_kv")
        if incremental_state is not None and self._no_incremental:
            raise RuntimeError(f"{', '.join(self._no_incremental)}: incremental decoding is not "
                               f"supported (the piece needs the whole sentence: encoder only)")
        need_weights = need_weights or need_head_weights
        self._check_input(query, key_padding_mask, incremental_state)
        tgt_len, bsz, embed_dim = query.size()
        q, k, v, ctx = self._project(query, key_padding_mask, incremental_state)
        dropout_p = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
        call = backends.Call(need_weights, ctx.incremental, tgt_len, ctx.src_len, dropout_p, q.is_cuda,
                             attn_mask is not None, self.training and torch.is_grad_enabled())
        path = self.path_for(call)
        run = backends.Run(self.pieces, attn_mask, self.scaling, dropout_p, self.flex_compile,
                           self._layer.band_half, self._layer.policy, layer=self._layer, call=call,
                           tuned=self.tuned_choices)
        heads_out, weights = path.apply(q, k, v, ctx, run)  # (B, H, T, D), probabilities or None
        self.last_run = (run.ran or path.name, run.query_blocks)
        out = self.out_proj(heads_out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim))
        for p in self.pieces:
            extra = p.output_term(heads_out, ctx)
            if extra is not None:
                out = out + extra
        if not need_weights:
            return out, None
        for p in self.pieces:  # a widened key axis folded back onto key positions
            weights = p.fold_weights(weights, ctx)
        weights = weights.transpose(1, 0)  # (H, B, T, S) like fairseq
        return out, (weights if need_head_weights else weights.mean(dim=0))

    def _check_input(self, query: Tensor, key_padding_mask: Optional[Tensor], incremental_state) -> None:
        """One line naming the layout expected, (T, B, C) time first, instead of torch's shape
        error deep in a path (or, for batch-first input with a padding mask, wrong numbers)."""
        expected = f"expected (T, B, C) = (time, batch, {self.embed_dim}), time first as in fairseq"
        if query.dim() != 3 or query.size(2) != self.embed_dim:
            raise ValueError(f"SelfAttention ({self.site.side} layer {self.layer_idx}): input of shape "
                             f"{tuple(query.shape)}; {expected}")
        if (key_padding_mask is not None and key_padding_mask.dim() > 0 and incremental_state is None
                and tuple(key_padding_mask.shape) != (query.size(1), query.size(0))):
            raise ValueError(f"SelfAttention ({self.site.side} layer {self.layer_idx}): input of shape "
                             f"{tuple(query.shape)} and key_padding_mask of shape {tuple(key_padding_mask.shape)}; "
                             f"{expected}, and key_padding_mask (B, T) with True = pad (batch-first input: "
                             f"x.transpose(0, 1))")

    def layer_input(self, x: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
        """The pieces' ``layer_input`` hooks, in order (called by the encoder layer)."""
        for p in self.pieces:
            x = p.layer_input(x, key_padding_mask)
        return x

    def _project(self, query, key_padding_mask, incremental_state):
        """q, k, v as (B, H, T|S, D) (keys and values after the cached ones) and the context."""
        tgt_len, bsz, _ = query.size()
        H, D = self.num_heads, self.head_dim

        def heads(x: Tensor) -> Tensor:  # (T, B, C) -> (B, H, T, D)
            return x.view(x.size(0), bsz, H, D).permute(1, 2, 0, 3)

        q, k, v = heads(self.q_proj(query)), heads(self.k_proj(query)), heads(self.v_proj(query))
        start, saved = 0, None
        if incremental_state is not None:
            saved = self._get_input_buffer(incremental_state)
            if "prev_key" in saved:
                start = saved["prev_key"].size(2)
                k = torch.cat([saved["prev_key"], k], dim=2)
                v = torch.cat([saved["prev_value"], v], dim=2)
            key_padding_mask = _append_prev_key_padding_mask(
                key_padding_mask, saved.get("prev_key_padding_mask"), bsz, k.size(2))
            saved["prev_key"], saved["prev_value"] = k, v
            saved["prev_key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, saved)
        src_len = k.size(2)
        kpm = None
        if key_padding_mask is not None and key_padding_mask.dim() > 0:
            kpm = key_padding_mask.to(torch.bool)  # (B, S)
        ctx = AttentionContext(
            site=self.site,
            bsz=bsz,
            tgt_len=tgt_len,
            src_len=src_len,
            q_pos=torch.arange(start, start + tgt_len, device=q.device),
            k_pos=torch.arange(src_len, device=q.device),
            key_padding_mask=kpm,
            training=self.training,
            incremental=incremental_state is not None,
            cache=saved,
        )
        return q, k, v, ctx

    # the decoding cache, laid out as fairseq's MultiheadAttention keeps it --------------
    def _get_input_buffer(self, incremental_state) -> Dict[str, Optional[Tensor]]:
        """This layer's cache (``prev_key``, ``prev_value``: (B, H, S, D); ``prev_key_padding_mask``)."""
        buffer = None if incremental_state is None else incremental_state.get(f"{self._incremental_state_id}.attn_state")
        return {} if buffer is None else buffer

    def _set_input_buffer(self, incremental_state, buffer: Dict[str, Optional[Tensor]]):
        if incremental_state is not None:
            incremental_state[f"{self._incremental_state_id}.attn_state"] = buffer
        return incremental_state

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """The cache reordered along the batch (beam search), as fairseq's decoder asks."""
        buffer = self._get_input_buffer(incremental_state)
        for key, value in buffer.items():
            if value is not None:
                buffer[key] = value.index_select(0, new_order)
        return self._set_input_buffer(incremental_state, buffer)

    def set_beam_size(self, beam_size: int) -> None:
        self.beam_size = beam_size


def _append_prev_key_padding_mask(key_padding_mask: Optional[Tensor], prev: Optional[Tensor],
                                  batch_size: int, src_len: int) -> Optional[Tensor]:
    """fairseq's ``MultiheadAttention._append_prev_key_padding_mask`` for self-attention
    (``static_kv=False``): the cached padding mask and the new step's, as float (1 = pad),
    zeros where one of them is missing."""
    if prev is not None and key_padding_mask is not None:
        return torch.cat([prev.float(), key_padding_mask.float()], dim=1)
    if prev is not None:
        if src_len > prev.size(1):
            filler = torch.zeros((batch_size, src_len - prev.size(1)), device=prev.device)
            return torch.cat([prev.float(), filler.float()], dim=1)
        return prev.float()
    if key_padding_mask is not None:
        if src_len > key_padding_mask.size(1):
            filler = torch.zeros((batch_size, src_len - key_padding_mask.size(1)), device=key_padding_mask.device)
            return torch.cat([filler.float(), key_padding_mask.float()], dim=1)
        return key_padding_mask.float()
    return None
