"""Block self-attention (``block``), Shen, Zhou, Long, Jiang and Zhang, ICLR 2018,
"Bi-Directional Block Self-Attention for Fast and Memory-Efficient Sequence
Modeling"; the "Block" row (+6.0M) of Table 1 of Yang et al. 2019 (CSAN), as
the CSAN authors re-implemented it in THUMT (``layers/attention_block.py``,
``models/transformer_block.py``; ``shared/design/csan_table1_baselines.md``
section 4): a simplified multi-head version of Shen's mBloSA, without the
forward/backward masks, feature-wise attention and fusion of the original.

The sentence is cut into blocks of b tokens (default b = 4). Per layer, with
per-head queries q, keys k, values v (the layer's own projections)::

    r_i     = sum_{j in blk(i)} softmax_j(q_i . k_j / sqrt(d)) v_j     intra-block, per head
    h_t     = sigmoid(W_s [r_t^1; ...; r_t^H] + b_s)                   source2token (C -> C)
    a_t^h   = (W_l h_t + b_l)_h                                         (C -> H) one logit per head
    vbar_m  = sum_{t in m} softmax_t(a_t^h) r_t^h                       block summary, per head
    o_m     = sum_n softmax_n(u_m^h . vbar_n^h / sqrt(d)) vbar_n^h,    u = W_u vbar + b_u (C -> C)
    G_m     = sigmoid(W_g [vbar_m; o_m] + b_g)                          (2C -> C)
    e_m     = G_m * o_m + (1 - G_m) * vbar_m
    y_i     = W_o r_i + W_e e_{blk(i)} + b_o

The authors concatenate [r^h; e^h] per head (2C wide) and project it with one
2C -> C matrix; that is exactly ``out_proj`` (W_o, fairseq's, so a stock
checkpoint's projection is reused) on r plus a bias-free ``context_proj``
(W_e) on e: the core's ``output_term`` hook adds W_e e after ``out_proj``.
The intra-block step is the core's attention under a block-diagonal mask
(attention dropout applies to it); the rest runs in ``output_term``, so the
gate is inside the self-attention sublayer: with pre-norm
(``--encoder-normalize-before``) it sees LN(x) and its output is added to x.

Choices (and departures from the authors' code):

* blocks are formed on the real tokens of each sentence (positions within the
  sentence, whatever the padding side): the authors pad every batch to a
  multiple of 4 (adding 4 pads when it already is one) and take the
  source2token softmax over pads and the inter-block attention over blocks of
  pads, so their output depends on the batch; here pad tokens are masked in
  source2token and blocks without a real token in the inter-block attention;
* inter-block attention dropout uses ``--attention-dropout``, like the authors'
  ``keep_prob`` on both attentions;
* all encoder layers by default (``--block-layers all``): the authors'
  ``transformer_block.py`` replaces all 6 (verified); Table 1's +6.0M is
  reproduced by neither 6 layers (7.90M) nor the lower 3 (3.95M);
* new weights Xavier-uniform, biases zero (fairseq's convention).

Parameters per layer: 5 C^2 + 3 C + C H + H = 1,316,360 at C = 512, H = 8.

Backends: fused and explicit (the intra-block step is a boolean mask; the
block summaries are computed from the heads' output on either path). Encoder
only, incremental decoding refused (``incremental_ok = False``).
"""

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..piece import AttentionPiece, AttentionSite, Int, Layers, register_piece
from ..sentence_positions import sentence_positions

MAX_BLOCK_SIZE = 1024


def _linear(n_in: int, n_out: int, bias: bool = True) -> nn.Linear:
    lin = nn.Linear(n_in, n_out, bias=bias)
    nn.init.xavier_uniform_(lin.weight)
    if bias:
        nn.init.zeros_(lin.bias)
    return lin


@register_piece
class BlockSelfAttention(AttentionPiece):
    """Intra-block attention, source2token block summaries, inter-block attention and a
    gate (Shen et al. 2018b, as in the CSAN authors' code)."""

    name = "block"
    incremental_ok = False
    conflicts = {
        "chained": "chained attention replaces the heads' output that Block summarises into blocks; "
                   "pick one of block/chained",
    }
    test_flags = {"block_layers": "0", "block_size": 2}
    sides = ("encoder",)
    settings = (
        Int("block_size", 4, hi=MAX_BLOCK_SIZE, metavar="B",
            help=f"tokens per block, 1..{MAX_BLOCK_SIZE} (default 4)"),
        Layers("block_layers", "all", "encoder layers with block self-attention",
               note="as in the authors' code"),
    )

    def __init__(self, site: AttentionSite, args):
        super().__init__(site)
        H, D = site.num_heads, site.head_dim
        C = H * D
        self.block_size = args.block_size
        self.dropout_p = float(getattr(args, "attention_dropout", 0.0) or 0.0)
        self.s2t_hidden = _linear(C, C)  # W_s
        self.s2t_logits = _linear(C, H)  # W_l
        self.inter_query = _linear(C, C)  # W_u
        self.gate = _linear(2 * C, C)  # W_g
        self.context_proj = _linear(C, C, bias=False)  # W_e: e's columns of the 2C -> C projection

    def block_ids(self, ctx) -> Tensor:
        """(B|1, S) block of every key, -1 for pads."""
        _, pos_k, _ = sentence_positions(ctx)
        blk = torch.div(pos_k, self.block_size, rounding_mode="floor")
        if ctx.key_padding_mask is not None:
            blk = blk.masked_fill(ctx.key_padding_mask, -1)
        return blk

    def allowed_mask(self, ctx) -> Tensor:
        blk = self.block_ids(ctx)  # (B|1, S)
        blk_q = blk.index_select(1, ctx.q_pos)
        return (blk_q[:, :, None] == blk[:, None, :])[:, None]  # (B|1, 1, T, S)

    def output_term(self, out: Tensor, ctx) -> Optional[Tensor]:
        B, H, T, D = out.shape
        C = H * D
        blk = self.block_ids(ctx).expand(B, T)  # (B, T)
        M = math.ceil(T / self.block_size)
        member = blk[:, None, :] == torch.arange(M, device=out.device)[None, :, None]  # (B, M, T)
        valid = member.any(dim=-1)  # (B, M) blocks holding a real token
        dtype = self.s2t_hidden.weight.dtype
        r = out.to(dtype)  # (B, H, T, D)
        r_cat = r.permute(0, 2, 1, 3).reshape(B, T, C)
        # source2token: one logit per head and token, softmax over the tokens of a block
        logits = self.s2t_logits(torch.sigmoid(self.s2t_hidden(r_cat))).transpose(1, 2)  # (B, H, T)
        logits = logits[:, :, None, :].masked_fill(~member[:, None], float("-inf"))  # (B, H, M, T)
        logits = logits.masked_fill(~valid[:, None, :, None], 0.0)  # empty blocks stay finite
        vbar = torch.matmul(torch.softmax(logits, dim=-1), r)  # (B, H, M, D)
        vbar_cat = vbar.permute(0, 2, 1, 3).reshape(B, M, C)
        # inter-block attention over the blocks that hold real tokens
        u = self.inter_query(vbar_cat).view(B, M, H, D).transpose(1, 2) * D ** -0.5
        scores = torch.matmul(u, vbar.transpose(-1, -2))  # (B, H, M, M)
        keys = valid | ~valid.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~keys[:, None, None, :], float("-inf"))
        probs = F.dropout(torch.softmax(scores, dim=-1), p=self.dropout_p, training=ctx.training)
        o_cat = torch.matmul(probs, vbar).permute(0, 2, 1, 3).reshape(B, M, C)
        g = torch.sigmoid(self.gate(torch.cat([vbar_cat, o_cat], dim=-1)))
        e = g * o_cat + (1 - g) * vbar_cat  # (B, M, C)
        # every token gets its block's context; pads get zeros
        e_tok = e.gather(1, blk.clamp(min=0)[:, :, None].expand(B, T, C))
        e_tok = e_tok.masked_fill((blk < 0)[:, :, None], 0.0)  # (B, T, C)
        return self.context_proj(e_tok).transpose(0, 1).to(out.dtype)  # (T, B, C)

    def extra_repr(self):
        return f"encoder layer {self.site.layer_idx}, block_size={self.block_size}"
