"""DropAttention (``dropattn_c``, ``dropattn_e``), Lin, Liu, Huang, Chen, Qiu and
Huang, 2019, "DropAttention: A Regularization Method for Fully-Connected
Self-Attention Networks" (arXiv:1907.11065).

Dropout on the attention-weight matrix ``A = softmax(q k^T / sqrt(d))``
during training only (identity at inference):

* ``dropattn_c`` (DropAttention(c)): drops whole key *columns*: key j is
  removed for every query of one (sentence, head);
* ``dropattn_e`` (DropAttention(e)): drops single *elements* ``A_ij``.

Window ``w`` (``--dropattn-window``): a drop starts at a position with
probability ``p / w`` and expands to the ``w`` contiguous key positions
``j .. j+w-1`` (cut at the end of the sequence), so about a fraction ``p``
(exactly ``1 - (1 - p/w)^w`` away from the end) of the keys is dropped.
``--dropattn-rate`` is ``p``.

Rescaling (``--dropattn-rescale``):

* ``normalized`` (default, the paper's): each row is renormalised to sum 1,
  ``A'_ij = M_ij A_ij / sum_j' M_ij' A_ij'``. This equals masking the dropped
  scores before the softmax, so it runs as a boolean ``allowed_mask`` on the
  fused path too;
* ``traditional``: ``A'_ij = M_ij A_ij / (1 - p)`` as in standard dropout
  (explicit path: ``post_softmax``).

Rows whose keys are all dropped: such a row (e.g. the first decoder query,
whose only key is itself, or a short sentence) is left *undropped* for that
step (its mask row is reset to keep everything, and it is not rescaled), so
nothing is divided by zero and no query loses all context. "All" refers to
the keys left by padding and, on the decoder side, the causal mask; if other
masking pieces (e.g. a CSAN window) empty a row, the core's rule applies and
that query outputs zeros.

Masks are sampled with torch's global RNG (``torch.manual_seed`` makes them
reproducible). Combined with 2D-CSAN (widened key axis) the same mask applies
to key position j in every head slot of the area.

Defaults (the paper's MT settings): p = 0.2, w = 2 for both variants,
normalized rescaling, every encoder and decoder self-attention layer
(``--dropattn-sides encoder,decoder``, ``--dropattn-layers all``).
``dropattn_c`` and ``dropattn_e`` are alternatives and cannot be combined.

Backends: ``normalized`` runs on the fused and the explicit path;
``traditional`` needs the explicit path (``--attn-backend auto`` picks it).
"""

from typing import Optional

import torch
from torch import Tensor

from ..piece import (
    AttentionPiece,
    AttentionSite,
    Choice,
    Float,
    Int,
    Layers,
    PieceConfigError,
    Sides,
    register_piece,
)

RESCALES = ("normalized", "traditional")
_CONFLICT = "both drop attention weights; pick one of dropattn_c/dropattn_e"


def expand_windows(starts: Tensor, w: int) -> Tensor:
    """Each True at key j also marks j+1 .. j+w-1 (last axis, cut at the end)."""
    out = starts.clone()
    for o in range(1, min(w, starts.size(-1))):
        out[..., o:] |= starts[..., :-o]
    return out


class _DropAttentionBase(AttentionPiece):
    columns: bool = False
    # 'traditional' rescales the probability matrix after the softmax: explicit path
    fused_with = {"dropattn_rescale": ("normalized",)}
    test_flags = {"dropattn_layers": "0"}
    settings = (
        Float("dropattn_rate", 0.2, lo=0.0, hi=1.0, hi_open=True, metavar="P",
              help="DropAttention: fraction p of attention weights (e) or key "
                   "columns (c) dropped in training, in [0, 1) (default 0.2)"),
        Int("dropattn_window", 2, metavar="W",
            help="DropAttention: each drop covers W contiguous key positions; "
                 "drops start with probability p/W; integer >= 1 (default 2)"),
        Choice("dropattn_rescale", "normalized", RESCALES,
               help="DropAttention rescaling: 'normalized' (renormalise rows to "
                    "sum 1, paper default; fused-compatible) or 'traditional' "
                    "(multiply by 1/(1-p))"),
        Sides("dropattn_sides", "encoder,decoder", "DropAttention"),
        Layers("dropattn_layers", "all", "layers with DropAttention"),
    )

    @classmethod
    def from_args(cls, site: AttentionSite, args):
        return cls(site, args.dropattn_rate, args.dropattn_window, args.dropattn_rescale)

    def __init__(self, site: AttentionSite, p: float = 0.2, window: int = 2,
                 rescale: str = "normalized"):
        super().__init__(site)
        if not 0.0 <= p < 1.0:
            raise PieceConfigError(f"--dropattn-rate must be a number in [0.0, 1.0) (got {p!r})")
        if rescale not in RESCALES:
            raise PieceConfigError(f"--dropattn-rescale must be one of {list(RESCALES)} "
                                   f"(got {rescale!r})")
        self.p = float(p)
        self.window = int(window)
        self.rescale = rescale

    # ---- the sampled mask ------------------------------------------------
    def active(self, ctx) -> bool:
        return ctx.training and self.p > 0.0

    def sample(self, ctx):
        """Sample this call's mask: ``(keep, lost)``, keep (B, H, T, S) bool (True = kept)
        and lost (B, H, T, 1) bool, the rows where every reachable key was dropped."""
        B, H, T, S = ctx.bsz, self.site.num_heads, ctx.tgt_len, ctx.src_len
        device = ctx.q_pos.device
        shape = (B, H, 1, S) if self.columns else (B, H, T, S)
        starts = torch.rand(shape, device=device) < (self.p / self.window)
        keep = (~expand_windows(starts, self.window)).expand(B, H, T, S)
        # keys this row may attend to anyway: not padding, and not in the future (decoder)
        reachable = torch.ones(1, 1, T, S, dtype=torch.bool, device=device)
        if self.site.side == "decoder":
            reachable = reachable & (ctx.k_pos[None, :] <= ctx.q_pos[:, None])
        if ctx.key_padding_mask is not None:
            reachable = reachable & ~ctx.key_padding_mask[:, None, None, :]
        lost = ~(keep & reachable).any(dim=-1, keepdim=True)
        return keep, lost

    def sample_keep(self, ctx) -> Tensor:
        """(B, H, T, S) keep-mask with the ``lost`` rows reset to keep everything."""
        keep, lost = self.sample(ctx)
        return keep | lost

    # ---- hooks ------------------------------------------------------------
    def allowed_mask(self, ctx) -> Optional[Tensor]:
        if self.rescale != "normalized" or not self.active(ctx):
            return None
        return self.sample_keep(ctx)

    def post_softmax(self, probs: Tensor, ctx) -> Tensor:
        if self.rescale != "traditional" or not self.active(ctx):
            return probs
        keep, lost = self.sample(ctx)
        # 1/(1-p) like standard dropout; the reset rows are left exactly as they were
        scale = torch.where(lost, 1.0, 1.0 / (1.0 - self.p)).to(probs.dtype)
        keep = (keep | lost).to(probs.dtype) * scale
        if probs.size(-1) != keep.size(-1):  # widened key axis (2D-CSAN)
            keep = keep.repeat(1, 1, 1, probs.size(-1) // keep.size(-1))
        return probs * keep

    def extra_repr(self):
        return (f"p={self.p}, window={self.window}, rescale={self.rescale}, "
                f"{self.site.side} layer {self.site.layer_idx}")


@register_piece
class DropAttentionColumns(_DropAttentionBase):
    """DropAttention(c): drop whole key columns (Lin et al. 2019). See module docstring."""

    name = "dropattn_c"
    columns = True
    conflicts = {"dropattn_e": _CONFLICT}


@register_piece
class DropAttentionElements(_DropAttentionBase):
    """DropAttention(e): drop single attention weights (Lin et al. 2019). See module docstring."""

    name = "dropattn_e"
    columns = False
    conflicts = {"dropattn_c": _CONFLICT}
