"""The one multi-head self-attention core that every variant plugs into.

``PluginSelfAttention`` subclasses fairseq's ``MultiheadAttention`` so that its
parameters (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``), their
initialisation and the incremental-decoding cache layout are exactly fairseq's:
a stock ``transformer`` state dict loads into it unchanged. It computes::

    softmax(scale * q k^T + biases, masked) @ v  (+ value-side terms)

with the pieces (see :mod:`.piece`) filling the hooks. Two backends:

* fused: ``torch.nn.functional.scaled_dot_product_attention`` with a boolean
  or additive mask (flash / memory-efficient kernels where available);
* explicit: the probability matrix is materialised (needed by pieces that
  transform it, and whenever attention weights are requested).

``backend="auto"`` picks the fused path whenever every active piece allows it
and no weights are requested. Third, ``flex`` (:mod:`.flex`,
``torch.nn.attention.flex_attention``): a piece with its own ``flex_forward``
as the layer's only piece (relpos kv/tied: relative positions with keys and
values without the probability matrix; alibi: its penalty as a ``score_mod``),
and band-masked layers (CSAN windows) with the blocks outside the band skipped.
``auto`` takes it on CUDA only (such a piece always, bands from
``flex.FLEX_WINDOW_MIN_LEN`` positions), with attention dropout 0 and no weights
requested; ``--attn-backend flex`` forces it on any device (the CPU tests). Shapes follow fairseq: input ``(T, B, C)``,
``key_padding_mask`` ``(B, S)`` with True = pad.

A query whose keys are all masked by a piece (e.g. a CSAN window lying in
padding, the first token of a DiSAN forward head) is an *emptied row*: its
probabilities are zero before ``post_softmax`` / ``value_term`` / ``combine``
see them (and again after each ``post_softmax``), so it feeds nothing into
pieces that mix rows (``chained``'s P^k, ``convattn``'s convolution), and its
output is zero for that head (never NaN). On the fused path the row attends
anywhere and the head's output row is zeroed, which is the same result.
"""

from contextlib import nullcontext
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules.multihead_attention import MultiheadAttention
from torch import Tensor, nn

from . import flex, local
from .piece import AttentionContext, AttentionPiece, AttentionSite

try:  # torch >= 2.3
    from torch.nn.attention import SDPBackend, sdpa_kernel

    _NO_CUDNN = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
except ImportError:  # pragma: no cover - older torch has no cuDNN attention backend
    sdpa_kernel = None


def sdpa_backends(q: Tensor, mask: Optional[Tensor], piece_shaped: bool):
    """Context for the fused call: keep cuDNN attention away from masks/biases made by pieces.

    On an H100 (torch 2.11, cuDNN backend chosen by default) a 1D-CSAN model trained in
    fp16 got wrong q/k gradients (~100% relative error) from the cuDNN kernel, while the
    memory-efficient and math kernels agreed with the explicit path
    (benchmarks/csan1d_fp16_probe.py, benchmarks/RESULTS.md). fairseq's own masks
    (padding, future mask) keep torch's default choice, as in stock fairseq.
    """
    if sdpa_kernel is not None and piece_shaped and mask is not None and q.is_cuda:
        return sdpa_kernel(_NO_CUDNN)
    return nullcontext()

BACKENDS = ("auto", "fused", "explicit", "flex")


class PluginSelfAttention(MultiheadAttention):
    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        site: AttentionSite,
        pieces: List[AttentionPiece] = (),
        dropout: float = 0.0,
        backend: str = "auto",
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
        if backend not in BACKENDS:
            raise ValueError(f"--attn-backend must be one of {BACKENDS} (got {backend!r})")
        self.site = site
        self.layer_idx = site.layer_idx
        self.backend = backend
        self.pieces = nn.ModuleList(pieces)
        expanders = [p for p in pieces if p.expands_kv]
        if len(expanders) > 1:
            raise ValueError(
                f"at most one piece may widen the key axis, got {[p.name for p in expanders]}"
            )
        # plain references to members of self.pieces, not submodules: each parameter is
        # registered (and saved) once, under pieces.<i>
        object.__setattr__(self, "_expander", expanders[0] if expanders else None)
        self.fused_ok = all(p.fused_ok for p in pieces)
        # a piece whose mask allows only keys within band_half positions (1D-CSAN) lets
        # long sequences take the block-local fused path (attention/local.py)
        bands = [p.band_half for p in pieces if getattr(p, "band_half", None) is not None]
        self._band_half = min(bands) if bands else None
        # a piece with flex_forward (relpos kv/tied, alibi) alone in the layer: flex_attention
        object.__setattr__(self, "_flex_piece", pieces[0] if len(pieces) == 1
                           and getattr(pieces[0], "flex_path_ok", False) else None)
        if backend == "flex":
            if not flex.HAVE_FLEX:
                raise ValueError("--attn-backend flex needs torch.nn.attention.flex_attention "
                                 "(torch >= 2.9)")
            if dropout > 0 and (self._flex_piece is not None or self._band_half is not None):
                raise ValueError(f"--attn-backend flex: flex_attention has no attention dropout; "
                                 f"needs --attention-dropout 0 (got {dropout})")

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

    def uses_fused_path(self, need_weights: bool = False) -> bool:
        if self.backend == "explicit" or need_weights:
            return False
        if not self.fused_ok:
            if self.backend == "fused":
                names = [p.name for p in self.pieces if not p.fused_ok]
                raise RuntimeError(f"--attn-backend fused: pieces {names} need the explicit path")
            return False
        return True

    def uses_flex_piece(self, need_weights: bool, dropout_p: float, on_cuda: bool) -> bool:
        """The piece's flex_forward (relpos kv/tied, alibi): forced by backend flex, on CUDA by auto."""
        if self._flex_piece is None or need_weights or self.backend not in ("auto", "flex"):
            return False
        if self.backend == "flex":
            return True
        return on_cuda and dropout_p == 0 and flex.HAVE_FLEX

    def _use_flex_window(self, factor, tgt_len, src_len, incremental_state, dropout_p, q) -> bool:
        """Band-masked self-attention through block-sparse flex_attention."""
        if (self._band_half is None or self.backend not in ("auto", "flex") or dropout_p > 0
                or incremental_state is not None or tgt_len != src_len or not flex.HAVE_FLEX):
            return False
        return self.backend == "flex" or (q.is_cuda and tgt_len >= flex.FLEX_WINDOW_MIN_LEN)

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
        need_weights = need_weights or need_head_weights
        tgt_len, bsz, embed_dim = query.size()
        H, D = self.num_heads, self.head_dim

        def heads(x: Tensor) -> Tensor:  # (T, B, C) -> (B, H, T, D)
            return x.view(x.size(0), bsz, H, D).permute(1, 2, 0, 3)

        q, k, v = heads(self.q_proj(query)), heads(self.k_proj(query)), heads(self.v_proj(query))

        start = 0
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
        device = q.device
        ctx = AttentionContext(
            site=self.site,
            bsz=bsz,
            tgt_len=tgt_len,
            src_len=src_len,
            q_pos=torch.arange(start, start + tgt_len, device=device),
            k_pos=torch.arange(src_len, device=device),
            key_padding_mask=kpm,
            training=self.training,
            incremental=incremental_state is not None,
            cache=saved if incremental_state is not None else None,
        )

        dropout_p = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
        if self.uses_flex_piece(need_weights, dropout_p, q.is_cuda):
            if dropout_p > 0:
                raise RuntimeError("--attn-backend flex: flex_attention has no attention dropout")
            out = self._flex_piece.flex_forward(q, k, v, start, kpm, attn_mask, self.scaling)
            out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)  # (B, H, T, D) -> (T, B, C)
            return self.out_proj(out), None

        for p in self.pieces:
            q, k, v = p.transform_qkv(q, k, v, ctx)

        # ---- additive bias and boolean "allowed" mask over (B, H, T, S) ----
        bias: Optional[Tensor] = None
        allowed: Optional[Tensor] = None
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                allowed = ~attn_mask
            else:
                bias = attn_mask
        for p in self.pieces:
            b = p.score_bias(q, k, ctx)
            if b is not None:
                bias = b if bias is None else bias + b
        piece_shaped = bias is not None and bias is not attn_mask
        piece_masked = False
        for p in self.pieces:
            m = p.allowed_mask(ctx)
            if m is not None:
                piece_masked = True
                allowed = m if allowed is None else allowed & m
        if kpm is not None:
            keep = ~kpm[:, None, None, :]  # (B, 1, 1, S)
            allowed = keep if allowed is None else allowed & keep
        if piece_masked and attn_mask is not None and attn_mask.dtype != torch.bool:
            # fairseq's future mask is additive (0 / -inf): make its -inf part boolean too,
            # so that the empty-row rule below sees rows emptied by it plus a piece's mask
            finite = attn_mask > float("-inf")
            allowed = allowed & finite
            bias = bias.masked_fill(~finite, 0.0)

        # ---- widen the key axis (2D-CSAN: keys/values of neighbouring heads) ----
        factor = 1
        if self._expander is not None:
            k, v, factor, slot_allowed = self._expander.expand_kv(k, v, ctx)
            ctx.kv_factor = factor
            if bias is not None:
                bias = bias.repeat(*([1] * (bias.dim() - 1)), factor)
            if allowed is not None:
                allowed = allowed.repeat(*([1] * (allowed.dim() - 1)), factor)
            if slot_allowed is not None:
                piece_masked = True
                allowed = slot_allowed if allowed is None else allowed & slot_allowed

        # rows left without any key: let them attend anywhere (no NaN), then give them zero
        # probabilities (explicit path) or a zero output per head (fused path)
        empty: Optional[Tensor] = None
        if piece_masked and allowed is not None:
            empty = ~allowed.any(dim=-1, keepdim=True)
            allowed = allowed | empty

        weights: Optional[Tensor] = None
        explicit = False
        if self.uses_fused_path(need_weights) and self._use_flex_window(
                factor, tgt_len, src_len, incremental_state, dropout_p, q):
            out = flex.masked_attention(q, k, v, bias, allowed, self.scaling)  # (B, H, T, D)
        elif self.uses_fused_path(need_weights):
            mask = allowed
            if bias is not None:
                mask = bias.to(q.dtype)
                if allowed is not None:
                    mask = mask.masked_fill(~allowed, float("-inf"))
            with sdpa_backends(q, mask, piece_shaped or piece_masked):
                if self._use_local(factor, tgt_len, src_len, incremental_state):
                    out = local.local_sdpa(q, k, v, mask, self._band_half, self.scaling, dropout_p)
                else:
                    out = F.scaled_dot_product_attention(
                        q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=self.scaling
                    )  # (B, H, T, D)
        else:
            explicit = True  # emptied rows are handled inside, before combine
            out, weights = self._explicit(q, k, v, bias, allowed, ctx, dropout_p, empty)

        if empty is not None and not explicit:
            out = out.masked_fill(empty, 0.0)  # fused paths: per head, no piece mixes heads there
        heads_out = out  # (B, H, T, D)
        out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
        out = self.out_proj(out)
        for p in self.pieces:
            extra = p.output_term(heads_out, ctx)
            if extra is not None:
                out = out + extra

        if not need_weights:
            return out, None
        if factor > 1:  # fold the widened key axis back onto key positions
            weights = weights.view(bsz, H, tgt_len, factor, src_len).sum(dim=3)
        weights = weights.transpose(1, 0)  # (H, B, T, S) like fairseq
        if not need_head_weights:
            weights = weights.mean(dim=0)
        return out, weights

    def layer_input(self, x: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
        """The pieces' ``layer_input`` hooks, in order (called by the encoder layer)."""
        for p in self.pieces:
            x = p.layer_input(x, key_padding_mask)
        return x

    def _use_local(self, factor, tgt_len, src_len, incremental_state) -> bool:
        """Block-local attention pays off for long self-attention under a narrow band."""
        return (self._band_half is not None and factor == 1 and incremental_state is None
                and tgt_len == src_len >= local.LOCAL_MIN_LEN
                and 2 * self._band_half < local.BLOCK)

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
