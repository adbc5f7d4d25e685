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
al. define self-attention only). See docs/pieces/relpos.md.

Tables are initialised with Xavier/Glorot uniform, as OpenNMT-py's Transformer
recipe (``-param_init_glorot``) does for every matrix (tensor2tensor uses its
uniform-unit-scaling default initializer).

Incremental decoding: distances come from the context's ``q_pos``/``k_pos``,
so a cached decoding step scores exactly as the full-sequence forward.

Backends: the piece declares its terms as data (:meth:`RelativePositions.distance_terms`:
the key table, the value table and the clip k) and the kernels of
:mod:`..backends.distance` run them. The key term is an additive score bias
(fused-compatible); the value term needs the probabilities, so on the hook paths ``kv`` and
``tied`` run explicit while ``k`` runs fused (``--attn-backend fused`` is accepted for ``k``
and refused for ``kv``/``tied`` at model build). Alone in its layer, relpos also runs: on
CUDA for inference and under ``--attn-backend flex``, ``kv``/``tied`` through flex_attention
(the value term rebuilt from the log-sum-exp: :mod:`..backends.distance.flex_forms`); on CPU from
the policy's ``blocked_min_len`` positions, every mode in the region split for an encoder
self-attention without attention dropout (the far keys through torch's fused kernel, the
strip of ``block + 2k`` keys explicitly), and ``kv``/``tied`` in query blocks for the
decoder's masked self-attention; on CUDA, the training calls of ``kv``/``tied`` from the
policy's ``cuda_training_min_len`` (512) positions in the region split too (measured faster
there than the explicit path; ``k`` stays fused, faster). The explicit path stays the reference.
``--attn-backend triton`` runs every mode (the key term as QA = q w_K^T, the value term from each row's mass per distance) through the Triton flash kernels
(:mod:`..backends.distance.triton_path`; CUDA, attention dropout 0, the piece alone in its layer),
encoder and decoder self-attention (fairseq's future mask read as the causal flag); ``--attn-backend
tuned`` times it beside the other paths and keeps the fastest per shape class.
"""

from typing import Optional

import torch
from torch import Tensor, nn

from ..backends.distance import DistanceTerms
from ..position_method_flags import replace_token_positions
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


@register_piece
class RelativePositions(AttentionPiece):
    """Shaw et al. (2018) relative position representations. See module docstring."""

    name = "relpos"
    # the a^V value term needs the probabilities; keys only is a score bias
    fused_with = {"relpos_mode": ("k",)}
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

    def value_table(self) -> Optional[Tensor]:
        if self.mode == "kv":
            return self.rel_values
        if self.mode == "tied":
            return self.rel_keys
        return None

    def distance_terms(self) -> DistanceTerms:
        """The key table, the value table (kv: its own, tied: the key table, k: none) and the clip."""
        return DistanceTerms(key_table=self.rel_keys, value_table=self.value_table(), clip=self.k)

    def score_bias(self, q: Tensor, k: Tensor, ctx) -> Tensor:
        """``q_i . a^K_ij / sqrt(d)`` as (B, H, T, S)."""
        return self.distance_terms().score_bias(q, ctx.q_pos, ctx.k_pos, self.scaling)

    def value_term(self, probs: Tensor, ctx) -> Optional[Tensor]:
        """``sum_j alpha_ij a^V_ij`` as (B, H, T, D)."""
        if self.mode == "k":
            return None
        B, H, T, width = probs.shape
        S = ctx.src_len
        if width != S:  # widened key axis (2D-CSAN): slots of one key share its distance
            probs = probs.view(B, H, T, width // S, S).sum(dim=3)
        return self.distance_terms().value_term(probs, ctx.q_pos, ctx.k_pos)

    def extra_repr(self):
        return f"k={self.k}, mode={self.mode}, {self.site.side} layer {self.site.layer_idx}"
