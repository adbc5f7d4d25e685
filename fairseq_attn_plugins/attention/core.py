"""The one multi-head self-attention core that every variant plugs into.

``PluginSelfAttention`` subclasses fairseq's ``MultiheadAttention`` so that its
parameters (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``), their
initialisation and the incremental-decoding cache layout are exactly fairseq's:
a stock ``transformer`` state dict loads into it unchanged. It computes::

    softmax(scale * q k^T + biases, masked) @ v  (+ value-side terms)

with the pieces (see :mod:`.piece`) filling the hooks. Which computation runs a call
(SDPA, block-local SDPA, flex_attention, or the explicit path that materialises the
probabilities) is chosen in :mod:`.backends`, from what the pieces declare; this module
only runs the hooks. Shapes follow fairseq: input ``(T, B, C)``, ``key_padding_mask``
``(B, S)`` with True = pad.

A query whose keys are all masked by a piece (e.g. a CSAN window lying in
padding, the first token of a DiSAN forward head) is an *emptied row*: its
probabilities are zero before ``post_softmax`` / ``value_term`` / ``combine``
see them (and again after each ``post_softmax``), so it feeds nothing into
pieces that mix rows (``chained``'s P^k, ``convattn``'s convolution), and its
output is zero for that head (never NaN). On the fused path the row attends
anywhere and the head's output row is zeroed, which is the same result.
"""

import dataclasses
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules.multihead_attention import MultiheadAttention
from torch import Tensor, nn

from . import backends
from .backends import BACKENDS, flex, local, sdpa  # noqa: F401  (BACKENDS re-exported)
from .piece import AttentionContext, AttentionPiece, AttentionSite, PieceConfigError


class PluginSelfAttention(MultiheadAttention):
    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        site: AttentionSite,
        pieces: List[AttentionPiece] = (),
        dropout: float = 0.0,
        backend: str = "auto",
        flex_compile: str = "auto",
        q_noise: float = 0.0,
        qn_block_size: int = 8,
    ):
        super().__init__(
            embed_dim,
            num_heads,
            dropout=dropout,
            self_attention=True,
            q_noise=q_noise,
            qn_block_size=qn_block_size,
        )
        self.site = site
        self.layer_idx = site.layer_idx
        self.pieces = nn.ModuleList(pieces)
        expanders = [p for p in pieces if p.expands_kv]
        if len(expanders) > 1:
            raise ValueError(
                f"at most one piece may widen the key axis, got {[p.name for p in expanders]}"
            )
        # plain references to members of self.pieces, not submodules: each parameter is
        # registered (and saved) once, under pieces.<i>
        object.__setattr__(self, "_expander", expanders[0] if expanders else None)
        bands = [p.band_half for p in pieces if p.band_half is not None]
        # the layer's only piece, when it computes the whole attention through flex_attention
        object.__setattr__(self, "_flex_piece", pieces[0] if len(pieces) == 1 and pieces[0].flex_path_ok else None)
        object.__setattr__(self, "_blocked_piece",
                           pieces[0] if len(pieces) == 1 and pieces[0].blocked_path_ok else None)
        self._no_incremental = [p.name for p in pieces if not p.incremental_ok]
        self._layer = backends.Layer(
            backend="auto",
            needs_probs=tuple(p.name for p in pieces if not p.runs_fused),
            flex_piece=self._flex_piece.name if self._flex_piece is not None else None,
            band_half=min(bands) if bands else None,
            widens_kv=self._expander is not None,
            blocked_piece=self._blocked_piece.name if self._blocked_piece is not None else None,
        )
        self.backend = backend
        self.flex_compile = flex_compile

    @property
    def backend(self) -> str:
        return self._layer.backend

    @backend.setter
    def backend(self, backend: str) -> None:
        """``--attn-backend``; refused here (at model build) when it cannot run this layer."""
        backends.check_backend(backend, self._layer.needs_probs, self.dropout_module.p)
        self._layer = dataclasses.replace(self._layer, backend=backend)

    def upgrade_state_dict_named(self, state_dict, name):
        """fairseq's upgrade, then drop the second copy of a piece's parameters that
        checkpoints of earlier versions hold (``_flex_piece.*``, ``_expander.*``: the same
        tensors as ``pieces.0.*``, registered twice)."""
        super().upgrade_state_dict_named(state_dict, name)
        prefix = f"{name}." if name else ""
        for alias in ("_flex_piece.", "_expander."):
            for key in [k for k in state_dict if k.startswith(prefix + alias)]:
                del state_dict[key]

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
            raise NotImplementedError("PluginSelfAttention supports neither before_softmax nor static_kv")
        if incremental_state is not None and self._no_incremental:
            raise RuntimeError(f"{', '.join(self._no_incremental)}: incremental decoding is not "
                               f"supported (the piece needs the whole sentence: encoder only)")
        need_weights = need_weights or need_head_weights
        tgt_len, bsz, embed_dim = query.size()
        q, k, v, ctx = self._project(query, key_padding_mask, incremental_state)
        dropout_p = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
        path = self.path_for(backends.Call(need_weights, ctx.incremental, tgt_len, ctx.src_len,
                                           dropout_p, q.is_cuda))
        if (path in (backends.FLEX_PIECE, backends.FLEX_BAND) and self.training
                and torch.is_grad_enabled() and not q.is_cuda and not flex.cpu_backward_ok()):
            raise PieceConfigError(flex.CPU_TRAINING)
        if path is backends.FLEX_PIECE:  # the piece computes the whole attention
            start = ctx.src_len - tgt_len  # positions decoded by earlier incremental steps
            out = self._flex_piece.flex_forward(q, k, v, start, ctx.key_padding_mask, attn_mask,
                                                self.scaling, self.flex_compile)
            return self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)), None
        if path is backends.QUERY_BLOCKS:  # the piece computes the whole attention (CPU)
            out = self._blocked_piece.blocked_forward(q, k, v, ctx, attn_mask, self.scaling, dropout_p)
            return self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)), None

        for p in self.pieces:
            q, k, v = p.transform_qkv(q, k, v, ctx)
        bias, allowed, piece_made = self._bias_and_mask(q, k, ctx, attn_mask)
        factor = 1
        if self._expander is not None:  # widen the key axis (2D-CSAN: neighbouring heads' keys)
            k, v, factor, slot_allowed = self._expander.expand_kv(k, v, ctx)
            ctx.kv_factor = factor
            if bias is not None:
                bias = bias.repeat(*([1] * (bias.dim() - 1)), factor)
            if allowed is not None:
                allowed = allowed.repeat(*([1] * (allowed.dim() - 1)), factor)
            if slot_allowed is not None:
                piece_made.add("mask")
                allowed = slot_allowed if allowed is None else allowed & slot_allowed
        # rows left without any key: let them attend anywhere (no NaN), then give them zero
        # probabilities (explicit path) or a zero output per head (the other paths)
        empty: Optional[Tensor] = None
        if "mask" in piece_made and allowed is not None:
            empty = ~allowed.any(dim=-1, keepdim=True)
            allowed = allowed | empty

        weights: Optional[Tensor] = None
        if path is backends.EXPLICIT:  # emptied rows are handled inside, before combine
            out, weights = self._explicit(q, k, v, bias, allowed, ctx, dropout_p, empty)
        else:
            out = self._fused(path, q, k, v, bias, allowed, dropout_p, bool(piece_made))
            if empty is not None:
                out = out.masked_fill(empty, 0.0)  # per head: no piece mixes heads there
        heads_out = out  # (B, H, T, D)
        out = self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim))
        for p in self.pieces:
            extra = p.output_term(heads_out, ctx)
            if extra is not None:
                out = out + extra
        if not need_weights:
            return out, None
        if factor > 1:  # fold the widened key axis back onto key positions
            weights = weights.view(bsz, self.num_heads, tgt_len, factor, ctx.src_len).sum(dim=3)
        weights = weights.transpose(1, 0)  # (H, B, T, S) like fairseq
        return out, (weights if need_head_weights else weights.mean(dim=0))

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
            key_padding_mask = MultiheadAttention._append_prev_key_padding_mask(
                key_padding_mask=key_padding_mask,
                prev_key_padding_mask=saved.get("prev_key_padding_mask"),
                batch_size=bsz,
                src_len=k.size(2),
                static_kv=False,
            )
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

    def _bias_and_mask(self, q, k, ctx, attn_mask):
        """The additive bias and the boolean "allowed" mask over (B, H, T, S) from fairseq's
        mask, the pieces' ``score_bias`` / ``allowed_mask`` and the padding, and which of
        the two a piece made (``{"bias", "mask"}``)."""
        bias: Optional[Tensor] = None
        allowed: Optional[Tensor] = None
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                allowed = ~attn_mask
            else:
                bias = attn_mask
        piece_made = set()
        for p in self.pieces:
            b = p.score_bias(q, k, ctx)
            if b is not None:
                piece_made.add("bias")
                bias = b if bias is None else bias + b
        for p in self.pieces:
            m = p.allowed_mask(ctx)
            if m is not None:
                piece_made.add("mask")
                allowed = m if allowed is None else allowed & m
        if ctx.key_padding_mask is not None:
            keep = ~ctx.key_padding_mask[:, None, None, :]  # (B, 1, 1, S)
            allowed = keep if allowed is None else allowed & keep
        if "mask" in piece_made and attn_mask is not None and attn_mask.dtype != torch.bool:
            # fairseq's future mask is additive (0 / -inf): make its -inf part boolean too,
            # so that the empty-row rule sees rows emptied by it plus a piece's mask
            finite = attn_mask > float("-inf")
            allowed = allowed & finite
            bias = bias.masked_fill(~finite, 0.0)
        return bias, allowed, piece_made

    def _fused(self, path, q, k, v, bias, allowed, dropout_p, piece_made) -> Tensor:
        """The flex band, block-local or SDPA path: (B, H, T, D)."""
        if path is backends.FLEX_BAND:
            return flex.masked_attention(q, k, v, bias, allowed, self.scaling, self.flex_compile)
        mask = sdpa.sdpa_mask(bias, allowed, q.dtype)
        with sdpa.sdpa_backends(q, mask, piece_made):
            if path is backends.BLOCK_LOCAL:
                return local.local_sdpa(q, k, v, mask, self._layer.band_half, self.scaling, dropout_p)
            return sdpa.sdpa_attention(q, k, v, mask, self.scaling, dropout_p)

    def _explicit(self, q, k, v, bias, allowed, ctx, dropout_p, empty=None):
        """Reference path: materialise the probabilities. Returns (out, probs).

        ``empty`` (B|1, H|1, T, 1): emptied rows, whose probabilities are zero before and
        after every ``post_softmax`` and whose per-head output is zero before ``combine``."""
        scores = torch.matmul(q * self.scaling, k.transpose(-1, -2))  # (B, H, T, S)
        if bias is not None:
            scores = scores + bias
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        if empty is not None:
            probs = probs.masked_fill(empty, 0.0)
        for p in self.pieces:
            probs = p.post_softmax(probs, ctx)
            if empty is not None:  # a convolution over rows must not refill an emptied row
                probs = probs.masked_fill(empty, 0.0)
        probs_q = probs.type_as(q)
        if dropout_p > 0:
            probs_q = F.dropout(probs_q, p=dropout_p, training=True)
        out = torch.matmul(probs_q, v)  # (B, H, T, D)
        for p in self.pieces:
            extra = p.value_term(probs_q, ctx)
            if extra is not None:
                out = out + extra
        if empty is not None:  # (B, H, T, D): zero per head, before combine mixes heads
            out = out.masked_fill(empty, 0.0)
        for p in self.pieces:
            out = p.combine(probs_q, v, out, ctx)
        return out, probs
