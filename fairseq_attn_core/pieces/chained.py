"""Chained self-attention (``chained``), Gupta 2019, "Chained self-attention"
(Stanford CS224n report; text in ``shared/papers/gupta2019_chained_self_attention.txt``).

Each head h applies its attention matrix P^h (T x T, rows summing to 1)
repeatedly to its values, K times (default K = 4, the paper's "max chain
length")::

    Att^{h,1} = P^h V^h,   Att^{h,k} = P^h Att^{h,k-1}  (= (P^h)^k V^h),  k = 2..K

computed iteratively (K - 1 extra T x T x D products), never forming matrix
powers. The K outputs are then projected back by W_attn (``--chained-w-attn``):

* ``shared`` (default, the paper's §3.2): per head,
  ``Att^h = [Att^{h,1} ... Att^{h,K}] W_attn`` with ONE W_attn of shape
  (K D x D), D = head dim, shared by all heads, no bias (the paper's formula
  has none). K D^2 new parameters per layer: 16,384 at base size (D = 64),
  98,304 on the 6 encoder layers; the paper reports +0.11% parameters.
* ``dense``: ``Linear(H K D -> C)`` over the concatenation of every head's K
  outputs (mixes heads; C H K D = 1,048,576 per base layer, +6.29M on 6
  layers). Kept as an option: checkpoints saved before ``--chained-w-attn``
  existed hold this form.

W_O: the paper's layer description has no output projection after W_attn
(nor before it: "the final output is the concatenation of the heads"); the
Transformer's own W_O (fairseq's ``out_proj``) is kept after W_attn, so a
stock checkpoint's W_O is reused, K = 1 with W_attn = I is exactly standard
attention (tested) and the only new parameters are W_attn's.

Flags: ``--chained-k`` K in 1..16 (default 4); ``--chained-w-attn
shared|dense`` (default ``shared``); ``--chained-sides`` ``encoder`` (default),
``decoder`` or ``both``; ``--chained-layers`` (default ``all``, on every side
chosen); ``--chained-init`` ``xavier`` (default, fairseq's init for
projections) or ``first`` (W_attn = I on the k = 1 block and 0 elsewhere:
starts as the baseline).

Decoder: under the causal mask row i of P is zero beyond i, so row
i of P^k V = sum_{j<=i} P_ij (P^{k-1} V)_j needs only rows <= i of the previous
order. In incremental decoding the piece keeps, per layer, the rows of
Att^{h,1} .. Att^{h,K-1} of every position decoded so far in the layer's
incremental buffer (``ctx.cache``, keys ``chained_z<k>``, (B, H, S, D); fairseq
reorders them with the beam like ``prev_key``), and a step computes the new
rows of each order from them: exactly the full forward's rows (tested in
float64, and beam search through fairseq-generate). Memory: (K - 1) times the
layer's value cache.

With other pieces' value terms (``relpos``'s a^V: R = sum_j P_ij a^V_ij), the
chain starts from the layer's full first-order output, so the value term is
chained too: Att^1 = P V + R, Att^k = P^(k-1) (P V + R). (The alternative,
P^k V + R, would add the relative values once, outside the chain; not offered.)

Attention dropout is applied to P once and the same dropped P is chained.
A row that the masks leave without keys contributes zeros (the core's rule).

Backends: explicit only (the ``combine`` hook needs the probabilities).
"""

import torch
from torch import Tensor, nn

from ..piece import AttentionPiece, AttentionSite, Choice, Int, Layers, Sides, register_piece

INITS = ("xavier", "first")
W_ATTN_FORMS = ("shared", "dense")
MAX_K = 16


@register_piece
class ChainedSelfAttention(AttentionPiece):
    """Chained self-attention P^k V, k = 1..K, projected by W_attn (Gupta 2019)."""

    name = "chained"
    fused_ok = False
    conflicts = {
        "csan2d": "chained attention raises the position-to-position matrix P (T x T) to powers; "
                  "2D-CSAN's probabilities run over (N+1) heads x positions, so P is T x (N+1)T "
                  "and P^k is undefined",
    }
    test_flags = {"chained_layers": "0", "chained_k": 3, "chained_sides": "both"}
    settings = (
        Int("chained_k", 4, hi=MAX_K, metavar="K",
            help=f"chained attention: number K of chained outputs P^k V, k=1..K, "
                 f"1..{MAX_K} (default 4; K=1 is standard attention)"),
        Choice("chained_w_attn", "shared", W_ATTN_FORMS, metavar="FORM",
               help="chained attention projection W_attn: 'shared' (one K*D x D "
                    "matrix shared by the heads, Gupta 2019; default) or 'dense' "
                    "(Linear(H*K*D -> C) mixing the heads)"),
        Choice("chained_init", "xavier", INITS, metavar="INIT",
               help="W_attn initialisation: 'xavier' (default) or 'first' (identity "
                    "on P V, zero on P^k V for k>1: starts as the baseline)"),
        Sides("chained_sides", "encoder", "chained attention",
              note="the decoder decodes incrementally with a cache of the earlier orders"),
        Layers("chained_layers", "all", "layers with chained attention"),
    )

    def __init__(self, site: AttentionSite, args):
        super().__init__(site)
        self.k = args.chained_k
        self.form = args.chained_w_attn
        H, D = site.num_heads, site.head_dim
        K = self.k
        if self.form == "shared":  # Att^h = [Att^{h,1} .. Att^{h,K}] W_attn, W_attn (K*D, D)
            self.w_attn = nn.Linear(K * D, D, bias=False)  # weight (D, K*D) = W_attn^T
        else:
            self.w_attn = nn.Linear(H * K * D, H * D, bias=False)
        with torch.no_grad():
            if args.chained_init == "xavier":
                nn.init.xavier_uniform_(self.w_attn.weight)
            elif self.form == "shared":  # identity on the P V block, zeros on P^k V, k > 1
                w = torch.zeros(D, K, D)
                w[:, 0, :] = torch.eye(D)
                self.w_attn.weight.copy_(w.view(D, K * D))
            else:
                w = torch.zeros(H * D, H, K, D)
                for h in range(H):
                    w[h * D:(h + 1) * D, h, 0, :] = torch.eye(D)
                self.w_attn.weight.copy_(w.view(H * D, -1))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # checkpoints saved before --chained-w-attn existed hold the dense W_attn and no such flag
        saved = state_dict.get(prefix + "w_attn.weight")
        if saved is not None and saved.shape != self.w_attn.weight.shape:
            other = "dense" if self.form == "shared" else "shared"
            raise RuntimeError(
                f"chained ({self.site.side} layer {self.site.layer_idx}): the checkpoint's W_attn "
                f"has shape {tuple(saved.shape)}, this model's --chained-w-attn {self.form} "
                f"expects {tuple(self.w_attn.weight.shape)}; a model trained with "
                f"--chained-w-attn {other} (checkpoints saved before the flag existed are dense) loads with "
                f"--chained-w-attn {other} (fairseq-generate: --model-overrides "
                f"\"{{'chained_w_attn': '{other}'}}\")"
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _previous_rows(self, ctx, order: int, n_prev: int):
        """Rows 0..n_prev-1 of Att^{order} kept by the earlier decoding steps, or None."""
        if n_prev == 0:
            return None
        cached = ctx.cache.get(f"chained_z{order}") if ctx.cache is not None else None
        if cached is None or cached.size(2) != n_prev:
            have = None if cached is None else cached.size(2)
            raise RuntimeError(
                f"chained attention ({self.site.side} layer {self.site.layer_idx}): the step "
                f"attends to {n_prev} earlier positions but the cache of order {order} holds "
                f"{have}; chained decoding must run step by step from the first position"
            )
        return cached

    def combine(self, probs: Tensor, v: Tensor, out: Tensor, ctx) -> Tensor:
        B, H, T, D = out.shape
        S = probs.size(-1)
        n_prev = S - T  # positions decoded by earlier incremental steps
        if n_prev < 0 or (n_prev > 0 and ctx.cache is None):
            raise RuntimeError(
                f"chained attention needs a square T x T probability matrix (or an incremental "
                f"step over cached positions), got {tuple(probs.shape)}"
            )
        chain = [out]  # new rows of Att^1 = P V (+ value-side terms of other pieces)
        for order in range(1, self.k):
            prev = self._previous_rows(ctx, order, n_prev)
            rows = chain[-1] if prev is None else torch.cat([prev, chain[-1]], dim=2)  # (B, H, S, D)
            if ctx.cache is not None:
                ctx.cache[f"chained_z{order}"] = rows
            chain.append(torch.matmul(probs, rows))  # new rows of Att^{order+1}
        z = torch.stack(chain, dim=3)  # (B, H, T, K, D)
        w = self.w_attn.weight
        if self.form == "shared":
            return self.w_attn(z.reshape(B, H, T, self.k * D).to(w.dtype)).to(out.dtype)  # (B, H, T, D)
        z = z.permute(0, 2, 1, 3, 4).reshape(B, T, H * self.k * D)
        y = self.w_attn(z.to(w.dtype)).to(out.dtype)  # (B, T, C)
        # the core reads (B, H, T, D) back as (T, B, H*D): hand C back in that layout
        return y.view(B, T, H, D).permute(0, 2, 1, 3)

    def extra_repr(self):
        return f"{self.site.side} layer {self.site.layer_idx}, K={self.k}, w_attn={self.form}"
