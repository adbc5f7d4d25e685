"""Chained self-attention (``chained``), Gupta 2019, "Chained self-attention".

Each head h applies its attention matrix P^h (T x T, rows summing to 1)
repeatedly to its values, K times (default K = 4)::

    Att^{h,1} = P^h V^h,   Att^{h,k} = P^h Att^{h,k-1}  (= (P^h)^k V^h),  k = 2..K

computed iteratively (K - 1 extra T x T x D products), never forming matrix
powers. The K outputs of all heads are concatenated and projected back to the
model dimension C by a learned W_attn (C x H*K*D, no bias)::

    o_i = W_attn [Att^{1,1}_i; ...; Att^{1,K}_i; ...; Att^{H,K}_i]

after which the layer's usual output projection W_O (fairseq's ``out_proj``)
applies unchanged, so a stock checkpoint's W_O is reused and two pieces never
fight over it. With K = 1 and W_attn = I the layer is exactly standard
attention; in general K = 1 is standard attention with output projection
W_O W_attn. (The paper text was not available to us; the formula follows the
project's issue 3 description. Whether the paper keeps W_O after W_attn is
unverified: a product of two linear maps has the same expressive power.)

Flags: ``--chained-k`` K in 1..16 (default 4); ``--chained-layers`` encoder
layers (default ``all``); ``--chained-init`` ``xavier`` (default, fairseq's
init for projections) or ``first`` (W_attn = I on the k = 1 block and 0
elsewhere: starts as the baseline).

Encoder only: P^k needs the full square T x T matrix of a layer; in the
decoder, row i of P^k V could be built from cached rows of P^{k-1} V, but the
core does not give pieces a cache of their own, so the decoder is not
supported (``incremental_ok = False``). Attention dropout is applied to P
once and the same dropped P is chained.

Backends: explicit only (the ``combine`` hook needs the probabilities).
"""

import torch
from torch import Tensor, nn

from ..piece import (
    AttentionPiece,
    AttentionSite,
    covers_site,
    parse_layer_spec,
    register_piece,
    require_choice,
    require_int,
)

INITS = ("xavier", "first")
MAX_K = 16


@register_piece
class ChainedSelfAttention(AttentionPiece):
    """Chained self-attention P^k V, k = 1..K, projected by W_attn (Gupta 2019)."""

    name = "chained"
    fused_ok = False
    incremental_ok = False
    conflicts = {
        "csan2d": "chained attention raises the position-to-position matrix P (T x T) to powers; "
                  "2D-CSAN's probabilities run over (N+1) heads x positions, so P is T x (N+1)T "
                  "and P^k is undefined",
    }
    test_flags = {"chained_layers": "0", "chained_k": 3}

    @classmethod
    def add_args(cls, parser):
        parser.add_argument("--chained-k", type=int, metavar="K",
                            help=f"chained attention: number K of chained outputs P^k V, k=1..K, "
                                 f"1..{MAX_K} (default 4; K=1 is standard attention)")
        parser.add_argument("--chained-layers", type=str, metavar="LAYERS",
                            help="encoder layers (0-based) with chained attention: '0,1', '0-2', "
                                 "'all' (default 'all')")
        parser.add_argument("--chained-init", type=str, metavar="INIT",
                            help="W_attn initialisation: 'xavier' (default) or 'first' (identity "
                                 "on P V, zero on P^k V for k>1: starts as the baseline)")

    @classmethod
    def set_defaults(cls, args):
        args.chained_k = getattr(args, "chained_k", 4)
        args.chained_layers = getattr(args, "chained_layers", "all")
        args.chained_init = getattr(args, "chained_init", "xavier")

    @classmethod
    def validate(cls, args):
        require_int(args, "chained_k", 1, MAX_K)
        require_choice(args, "chained_init", INITS)
        parse_layer_spec(args.chained_layers, args.encoder_layers, "--chained-layers")

    @classmethod
    def build(cls, args, site: AttentionSite):
        if not covers_site(args, "chained", site, sides="encoder"):
            return None
        return cls(site, args)

    def __init__(self, site: AttentionSite, args):
        super().__init__(site)
        self.k = args.chained_k
        H, D = site.num_heads, site.head_dim
        C = H * D
        self.w_attn = nn.Linear(H * self.k * D, C, bias=False)
        with torch.no_grad():
            if args.chained_init == "xavier":
                nn.init.xavier_uniform_(self.w_attn.weight)
            else:  # identity on every head's P V block, zeros on P^k V, k > 1
                w = torch.zeros(C, H, self.k, D)
                for h in range(H):
                    w[h * D:(h + 1) * D, h, 0, :] = torch.eye(D)
                self.w_attn.weight.copy_(w.view(C, -1))

    def combine(self, probs: Tensor, v: Tensor, out: Tensor, ctx) -> Tensor:
        B, H, T, D = out.shape
        if probs.size(-1) != T:
            raise RuntimeError(
                f"chained attention needs a square T x T probability matrix, got {tuple(probs.shape)}"
            )
        chain = [out]  # P V (+ value-side terms of other pieces)
        for _ in range(self.k - 1):
            chain.append(torch.matmul(probs, chain[-1]))
        z = torch.stack(chain, dim=3)  # (B, H, T, K, D)
        z = z.permute(0, 2, 1, 3, 4).reshape(B, T, H * self.k * D)
        y = self.w_attn(z.to(self.w_attn.weight.dtype)).to(out.dtype)  # (B, T, C)
        # the core reads (B, H, T, D) back as (T, B, H*D): hand C back in that layout
        return y.view(B, T, H, D).permute(0, 2, 1, 3)

    def extra_repr(self):
        return f"encoder layer {self.site.layer_idx}, K={self.k}"
