"""Relative position representations (``relpos``), Shaw, Uszkoreit and Vaswani,
NAACL 2018, "Self-Attention with Relative Position Representations"
(arXiv:1803.02155).

Every (query i, key j) pair gets two learned vectors chosen by the clipped
distance ``j - i``::

    a^K_ij = w^K[clip(j - i, k)],  a^V_ij = w^V[clip(j - i, k)],
    clip(x, k) = max(-k, min(k, x))
    e_ij  = q_i . (k_j + a^K_ij) / sqrt(d)
    alpha = softmax_j(e_ij)
    z_i   = sum_j alpha_ij (v_j + a^V_ij)

``w^K`` and ``w^V`` are tables of shape ``(2k + 1, d_head)``, one pair per
layer, shared by all heads (as in the paper). Default ``k = 16``
(``--relpos-k``; the paper reports little difference for k >= 2;
tensor2tensor's ``transformer_relative`` uses 20).

Options:

* ``--relpos-mode kv`` (default, the paper): separate key and value tables;
  ``k``: keys only (no ``a^V`` term, the paper's ablation);
  ``tied``: one table used for both keys and values (what OpenNMT-py does).
* ``--relpos-sides`` (default ``encoder,decoder``) and ``--relpos-layers``
  (default ``all``): which self-attention layers get tables.
* ``--relpos-abs-pos drop`` (default) / ``keep``: whether relative positions
  *replace* fairseq's sinusoidal position embeddings. The paper's relative
  model has no absolute positions ("combining relative and absolute position
  representations yields no further improvement"; tensor2tensor's
  ``transformer_relative`` sets ``pos = None``), so ``drop`` is the default:
  it sets fairseq's ``--no-token-positional-embeddings`` at model build (with
  a log line). That removes them on both sides, so ``drop`` requires
  ``--relpos-sides encoder,decoder``; use ``keep`` for one-sided relpos or to
  keep both kinds of position.

CSAN Table 1's Rel_Pos (+0.1M) is the default: a table pair in every
self-attention of encoder and decoder, 12 x 2 (2k+1) d_head = 50,688 parameters
at base size. The CSAN authors' code also gives each encoder-decoder attention a
table (74,496 in all) and keeps the sinusoidal positions (``--relpos-abs-pos
keep``); cross-attention tables are not offered (fairseq's own module; Shaw et
al. define self-attention only). See docs/pieces_relpos_disan_dropattn.md.

Tables are initialised with Xavier/Glorot uniform, as OpenNMT-py's Transformer
recipe (``-param_init_glorot``) does for every matrix (tensor2tensor uses its
uniform-unit-scaling default initializer).

Incremental decoding: distances come from the context's ``q_pos``/``k_pos``,
so a cached decoding step scores exactly as the full-sequence forward.

Backends: the key term is an additive score bias (fused-compatible); the value
term needs the probabilities, so ``kv`` and ``tied`` run on the explicit path
while ``k`` runs on the fused path (``auto`` picks it; ``--attn-backend fused``
is accepted for ``k`` and refused for ``kv``/``tied`` at model build).
``kv``/``tied`` have a third path, ``flex`` (:func:`..flex.relpos_attention`): the
key term as a flex_attention ``score_mod``, the value term rebuilt from the
log-sum-exp (window probabilities + the two tails' masses), no probability
matrix. ``auto`` takes it on CUDA when relpos is the layer's only piece and
attention dropout is 0; ``--attn-backend flex`` forces it (CPU tests). The
explicit path stays the reference.
"""

from typing import Optional

import torch
from torch import Tensor, nn

from .. import flex
from ..position_methods import replace_token_positions
from ..piece import (
    AttentionPiece,
    AttentionSite,
    Choice,
    Int,
    Layers,
    PieceConfigError,
    Sides,
    register_piece,
)


MODES = ("kv", "k", "tied")
ABS_POS = ("drop", "keep")


def clipped_distance_index(q_pos: Tensor, k_pos: Tensor, k: int) -> Tensor:
    """(T, S) long: ``clip(j - i, k) + k``, the row of the table for each pair."""
    return (k_pos[None, :] - q_pos[:, None]).clamp(-k, k) + k


@register_piece
class RelativePositions(AttentionPiece):
    """Shaw et al. (2018) relative position representations. See module docstring."""

    name = "relpos"
    # class-level: conservative (full relpos needs the explicit path);
    # instances with --relpos-mode k set fused_ok = True.
    fused_ok = False
    test_flags = {"relpos_layers": "0", "relpos_k": 2}
    settings = (
        Int("relpos_k", 16, metavar="K",
            help="relative positions: clipping distance k, integer >= 1; "
                 "tables have 2k+1 rows (default 16)"),
        Choice("relpos_mode", "kv", MODES,
               help="relative positions: 'kv' separate key and value tables "
                    "(paper, default), 'k' keys only, 'tied' one table for both "
                    "(OpenNMT-py)"),
        Sides("relpos_sides", "encoder,decoder", "relative positions"),
        Layers("relpos_layers", "all", "layers with relative positions"),
        Choice("relpos_abs_pos", "drop", ABS_POS,
               help="relative positions: 'drop' the sinusoidal position embeddings "
                    "(paper, default; sets --no-token-positional-embeddings, needs "
                    "--relpos-sides encoder,decoder) or 'keep' them as well"),
    )

    @classmethod
    def check_combination(cls, args):
        replace_token_positions(cls, args, "relpos", "relative positions")

    @classmethod
    def fused_ok_with(cls, args) -> bool:
        # the a^V value term needs the probabilities; keys only is a score bias
        return args.relpos_mode == "k"

    @classmethod
    def from_args(cls, site: AttentionSite, args):
        return cls(site, args.relpos_k, args.relpos_mode)

    def __init__(self, site: AttentionSite, k: int = 16, mode: str = "kv"):
        super().__init__(site)
        if mode not in MODES:
            raise PieceConfigError(f"--relpos-mode must be one of {list(MODES)} (got {mode!r})")
        self.k = k
        self.mode = mode
        self.scaling = site.head_dim ** -0.5
        rows, d = 2 * k + 1, site.head_dim
        self.rel_keys = nn.Parameter(torch.empty(rows, d))
        nn.init.xavier_uniform_(self.rel_keys)
        if mode == "kv":
            self.rel_values = nn.Parameter(torch.empty(rows, d))
            nn.init.xavier_uniform_(self.rel_values)
        else:
            self.rel_values = None
        # keys only: a pure score bias, fine for scaled_dot_product_attention
        self.fused_ok = mode == "k"

    def value_table(self) -> Optional[Tensor]:
        if self.mode == "kv":
            return self.rel_values
        if self.mode == "tied":
            return self.rel_keys
        return None

    def score_bias(self, q: Tensor, k: Tensor, ctx) -> Tensor:
        """``q_i . a^K_ij / sqrt(d)`` as (B, H, T, S)."""
        B, H, T, _ = q.shape
        idx = clipped_distance_index(ctx.q_pos, ctx.k_pos, self.k)  # (T, S)
        # q against every table row once, then pick the row of each (i, j)
        q_rows = torch.matmul(q, self.rel_keys.to(q.dtype).t())  # (B, H, T, 2k+1)
        bias = q_rows.gather(-1, idx.expand(B, H, T, idx.size(-1)))
        return bias * self.scaling

    def value_term(self, probs: Tensor, ctx) -> Optional[Tensor]:
        """``sum_j alpha_ij a^V_ij`` as (B, H, T, D)."""
        table = self.value_table()
        if table is None:
            return None
        B, H, T, width = probs.shape
        S = ctx.src_len
        if width != S:  # widened key axis (2D-CSAN): slots of one key share its distance
            probs = probs.view(B, H, T, width // S, S).sum(dim=3)
        idx = clipped_distance_index(ctx.q_pos, ctx.k_pos, self.k).expand(B, H, T, S)
        # sum the probabilities falling on each table row, then one small matmul
        per_row = probs.new_zeros(B, H, T, 2 * self.k + 1).scatter_add_(-1, idx, probs)
        return torch.matmul(per_row, table.to(probs.dtype))

    @property
    def flex_path_ok(self) -> bool:
        """kv/tied have a value term: the flex path is what avoids the probability matrix."""
        return self.value_table() is not None

    def flex_forward(self, q: Tensor, k: Tensor, v: Tensor, start: int, key_padding_mask,
                     attn_mask, scale: float) -> Tensor:
        """The whole attention of this layer through flex_attention, (B, H, T, D)."""
        return flex.relpos_attention(q, k, v, self.rel_keys, self.value_table(), self.k, start,
                                     key_padding_mask, attn_mask, scale)

    def extra_repr(self):
        return f"k={self.k}, mode={self.mode}, {self.site.side} layer {self.site.layer_idx}"
