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

Backends: the key term is an additive score bias (fused-compatible); the value
term needs the probabilities, so ``kv`` and ``tied`` run on the explicit path
while ``k`` runs on the fused path (``auto`` picks it; ``--attn-backend fused``
is accepted for ``k`` and refused for ``kv``/``tied`` at model build).
``kv``/``tied`` have a third path, ``flex`` (:func:`relpos_attention`, below): the
key term as a flex_attention ``score_mod``, the value term rebuilt from the
log-sum-exp (window probabilities + the two tails' masses), no probability
matrix. ``auto`` takes it on CUDA when relpos is the layer's only piece and
attention dropout is 0; ``--attn-backend flex`` forces it (CPU tests). On CPU, from
``backends.BLOCKED_MIN_LEN`` positions, ``auto`` takes the region split for an encoder
self-attention without attention dropout, every mode (:func:`region_relpos_attention`:
the far left and far right keys as plain attention through torch's CPU flash kernel, the
band of 2k+1 keys explicitly), and the query blocks (:func:`blocked_relpos_attention`,
kv/tied) for the decoder's masked self-attention. The explicit path stays the reference.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..backends import flex, regions
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
#: query block of :func:`band_scores`
BAND_BLOCK = 32
#: query rows per block of :func:`blocked_relpos_attention`
CPU_BLOCK = 128
#: query rows per block of :func:`region_relpos_attention`
REGION_BLOCK = 64


def clipped_distance_index(q_pos: Tensor, k_pos: Tensor, k: int) -> Tensor:
    """(T, S) long: ``clip(j - i, k) + k``, the row of the table for each pair."""
    return (k_pos[None, :] - q_pos[:, None]).clamp(-k, k) + k


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

    @property
    def blocked_path_ok(self) -> bool:
        """kv/tied: the query-block path keeps no probability matrix for the backward (CPU)."""
        return self.value_table() is not None

    @property
    def region_path_ok(self) -> bool:
        """Every mode: on the far regions the key term is one constant per query."""
        return True

    def region_forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor],
                       scale: float) -> Tensor:
        """An encoder self-attention of this layer from its three key regions, (B, H, T, D)."""
        return region_relpos_attention(q, k, v, self.rel_keys, self.value_table(), self.k,
                                       key_padding_mask, scale)

    def blocked_forward(self, q: Tensor, k: Tensor, v: Tensor, ctx, attn_mask, scale: float,
                        dropout_p: float) -> Tensor:
        """The whole attention of this layer in recomputed query blocks, (B, H, T, D)."""
        return blocked_relpos_attention(q, k, v, self.rel_keys, self.value_table(), self.k,
                                        ctx.q_pos, ctx.k_pos, ctx.key_padding_mask, attn_mask,
                                        scale)

    def flex_forward(self, q: Tensor, k: Tensor, v: Tensor, start: int, key_padding_mask,
                     attn_mask, scale: float, compile: str = "none") -> Tensor:
        """The whole attention of this layer through flex_attention, (B, H, T, D)."""
        return relpos_attention(q, k, v, self.rel_keys, self.value_table(), self.k, start,
                                key_padding_mask, attn_mask, scale, compile)

    def extra_repr(self):
        return f"k={self.k}, mode={self.mode}, {self.site.side} layer {self.site.layer_idx}"


# ---------------------------------------------------------------------------
# The region-split path (CPU training of encoder self-attention)
# ---------------------------------------------------------------------------
def region_relpos_attention(q: Tensor, k: Tensor, v: Tensor, rel_keys: Tensor,
                            rel_values: Optional[Tensor], kmax: int,
                            key_padding_mask: Optional[Tensor], scale: float,
                            block: Optional[int] = None) -> Tensor:
    """Shaw et al. keys (and values) of a self-attention, queries = keys at positions 0..T-1,
    from three regions of keys per block of ``block`` queries ``[a, e)``
    (:mod:`..backends.regions`):

    - far left ``j < a - k``: every key is more than k left of every query of the block, so
      the key term is ``c^L_i = scale q_i . w_K[-k]`` for all of them and the region is plain
      attention (:func:`regions.far_forward`, torch's CPU flash kernel) with output ``o^L_i``
      and log-sum-exp ``lse^L_i + c^L_i``; far right ``j >= e + k`` likewise with ``w_K[+k]``;
    - the strip ``a - k <= j < e + k`` (``block + 2k`` keys: the band and the near parts of
      the far regions): its scores ``e_ij = scale q_i . (k_j + w_K[clip(j - i)])`` explicitly,
      (B, H, T, block + 2k).

    With ``lse_i`` the log-sum-exp over the three, the far regions' weights (their
    probability mass) are ``m^L_i = exp(lse^L_i + c^L_i - lse_i)``, ``m^R_i``, the strip's
    probabilities ``p_ij = exp(e_ij - lse_i)``, and::

        z_i = m^L_i (o^L_i + w_V[-k]) + m^R_i (o^R_i + w_V[+k]) + sum_j p_ij (v_j + w_V[clip(j - i)])

    (``rel_values`` None, mode k: no ``w_V`` terms). The same sums as the explicit path,
    regrouped. A hand-written backward (:class:`_RegionSplit`) keeps q, k, v, z, the far
    outputs and the log-sum-exps (no (B, H, T, block + 2k) tensor), recomputes the strip,
    and gives the far keys to the kernel's backward as part of the whole softmax. A region a
    query lacks (blocks near the ends, keys padding removes) has weight 0; a query without
    any key outputs zeros (the core's convention). No attention dropout (the chooser sends
    a layer with dropout elsewhere).

    bf16 / fp16 inputs run in float32 and the output is cast back (the explicit path's softmax
    is float32 too; in bf16 the recomputed probabilities doubled the gradients' error).

    q, k, v: (B, H, T, D); key_padding_mask (B, T) True = pad. Returns (B, H, T, D)."""
    acc = torch.promote_types(q.dtype, torch.float32)
    table_v = None if rel_values is None else rel_values.to(acc)
    out = _RegionSplit.apply(q.to(acc), k.to(acc), v.to(acc), rel_keys.to(acc), table_v, kmax,
                             key_padding_mask, scale, max(1, min(block or REGION_BLOCK, q.size(2))))
    return out.to(q.dtype)


class _Strip:
    """The strips of :func:`region_relpos_attention`: block n's rows ``n block + r`` against
    the keys ``n block - k + c`` (c < W = block + 2k), as (B, H, nb, block, W)."""

    def __init__(self, q: Tensor, kmax: int, block: int, key_padding_mask: Optional[Tensor]):
        B, H, T, D = q.shape
        self.T, self.kmax, self.block = T, kmax, block
        self.nb = -(-T // block)
        self.Tp, self.W = self.nb * block, block + 2 * kmax
        r = torch.arange(block, device=q.device)[:, None]
        c = torch.arange(self.W, device=q.device)
        self.rel = ((c - kmax - r).clamp(-kmax, kmax) + kmax).expand(B, H, self.nb, block, self.W)
        j = (torch.arange(self.nb, device=q.device) * block - kmax)[:, None, None] + c  # (nb, 1, W)
        valid = (j >= 0) & (j < T)
        if key_padding_mask is not None:
            valid = (valid & ~key_padding_mask[:, j.clamp(0, T - 1)]).unsqueeze(1)  # (B, 1, nb, 1, W)
        self.invalid = ~valid

    def rows(self, x: Tensor, fill: float = 0.0) -> Tensor:
        """(B, H, T, n) -> (B, H, nb, block, n), rows past T filled with ``fill``."""
        if self.Tp > self.T:
            x = F.pad(x, (0, 0, 0, self.Tp - self.T), value=fill)
        return x.view(x.shape[:2] + (self.nb, self.block, x.size(-1)))

    def unrows(self, x: Tensor) -> Tensor:
        """(B, H, nb, block, n) -> (B, H, T, n)."""
        return x.reshape(x.shape[:2] + (self.Tp, x.size(-1)))[:, :, : self.T]

    def windows(self, x: Tensor) -> Tensor:
        """(B, H, T, D) -> each block's keys (B, H, nb, W, D), zero outside [0, T)."""
        padded = F.pad(x, (0, 0, self.kmax, self.Tp + self.kmax - self.T))
        return padded.unfold(2, self.W, self.block).transpose(-1, -2).contiguous()

    def unwindows(self, g: Tensor) -> Tensor:
        """The transpose of :meth:`windows`: (B, H, nb, W, D) -> (B, H, T, D)."""
        B, H, nb, W, D = g.shape
        block, k2 = self.block, 2 * self.kmax
        if k2 > block:  # windows overlapping more than their neighbours
            size = [B, H, self.Tp + k2, D]
            full = torch.ops.aten.unfold_backward(g.transpose(-1, -2), size, 2, W, block)
        else:  # each window: its own block, then the first 2k rows of the next one
            full = g.new_zeros(B, H, self.Tp + block, D)
            full[:, :, : self.Tp].view(B, H, nb, block, D).add_(g[..., :block, :])
            full[:, :, block:].view(B, H, nb, block, D)[..., :k2, :].add_(g[..., block:, :])
        return full[:, :, self.kmax: self.kmax + self.T]

    def scores(self, q, kw, qa, scale):
        """``scale q_i . (k_j + w_K[clip(j - i)])`` (B, H, nb, block, W), -inf off the keys."""
        s = torch.matmul(self.rows(q), kw.transpose(-1, -2)).mul_(scale).add_(self.rows(qa).gather(-1, self.rel))
        return s.masked_fill_(self.invalid, float("-inf"))

    def per_distance(self, x: Tensor) -> Tensor:
        """Sum (B, H, nb, block, W) per clipped distance: (B, H, T, 2k+1)."""
        out = x.new_zeros(x.shape[:-1] + (2 * self.kmax + 1,)).scatter_add_(-1, self.rel, x)
        return self.unrows(out)


class _RegionSplit(torch.autograd.Function):
    """Forward and backward of :func:`region_relpos_attention`.

    Backward: with ``P_ij`` the probabilities over all keys and ``a_ij = w_V[clip(j - i)]``,
    ``dS_ij = P_ij (dz_i . (v_j + a_ij) - delta_i)``, ``delta_i = dz_i . z_i``. On the far
    left ``P_ij = m^L_i P^L_ij`` (P^L the region's own softmax) and ``a_ij = w_V[-k]``, so
    ``dS_ij = P^L_ij (dO_i . v_j - dO_i . (z_i - w_V[-k]))`` with ``dO = m^L dz``: the
    kernel's backward given ``dO`` and ``z - w_V[-k]`` as its output (its ``delta`` is
    ``dO . out``). The region's constant gets the sum of its ``dS``,
    ``m^L_i dz_i . (o^L_i + w_V[-k] - z_i)``. The strip's ``dS`` is recomputed explicitly."""

    @staticmethod
    def forward(ctx, q, k, v, table_k, table_v, kmax, key_padding_mask, scale, block):
        R = 2 * kmax + 1
        st = _Strip(q, kmax, block, key_padding_mask)
        qa = torch.matmul(q, table_k.t()) * scale  # (B, H, T, 2k+1)
        kw, vw = st.windows(k), st.windows(v)
        s = st.scores(q, kw, qa, scale)
        far_out, kernel_lse, far_lse = regions.far_forward(q, k, v, key_padding_mask, block, kmax, scale)
        far_lse = far_lse.to(q.dtype) + torch.stack([qa[..., 0], qa[..., R - 1]])  # (2, B, H, T)
        top = torch.maximum(st.unrows(s.amax(-1, keepdim=True))[..., 0], far_lse.amax(0))
        top = top.masked_fill(torch.isneginf(top), 0.0)
        p = torch.exp(s.sub_(st.rows(top[..., None])))  # the strip's exp(e_ij - top_i)
        total = st.unrows(p.sum(-1, keepdim=True))[..., 0] + torch.exp(far_lse - top).sum(0)
        # a query without any key: lse +inf, every probability 0, output 0
        lse = torch.where(total > 0, top + torch.log(total), torch.full_like(total, float("inf")))
        p.mul_(st.rows(torch.exp(top - lse)[..., None]))  # exp(e_ij - lse_i)
        mass = torch.exp(far_lse - lse)[..., None]  # (2, B, H, T, 1): m^L, m^R
        z = st.unrows(torch.matmul(p, vw)) + (mass * far_out).sum(0)
        if table_v is not None:
            z = z + torch.matmul(st.per_distance(p), table_v) + mass[0] * table_v[0] + mass[1] * table_v[R - 1]
        ctx.save_for_backward(q, k, v, table_k, table_v, key_padding_mask, z, lse, far_out,
                              kernel_lse, mass)
        ctx.kmax, ctx.scale, ctx.block = kmax, scale, block
        return z

    @staticmethod
    def backward(ctx, dz):
        q, k, v, table_k, table_v, key_padding_mask, z, lse, far_out, kernel_lse, mass = ctx.saved_tensors
        kmax, scale, block = ctx.kmax, ctx.scale, ctx.block
        R = 2 * kmax + 1
        dz = dz.contiguous()
        st = _Strip(q, kmax, block, key_padding_mask)
        qa = torch.matmul(q, table_k.t()) * scale
        kw, vw = st.windows(k), st.windows(v)
        p = torch.exp(st.scores(q, kw, qa, scale).sub_(st.rows(lse[..., None], float("inf"))))
        delta = (dz * z).sum(-1)  # (B, H, T)
        dzb = st.rows(dz)
        dp = torch.matmul(dzb, vw.transpose(-1, -2))  # (B, H, nb, block, W): dz_i . v_j
        if table_v is not None:
            dp.add_(st.rows(torch.matmul(dz, table_v.t())).gather(-1, st.rel))  # + dz_i . a_ij
        del vw
        ds = dp.sub_(st.rows(delta[..., None])).mul_(p)  # d loss / d scores of the strip
        dq = st.unrows(torch.matmul(ds, kw).mul_(scale))
        del kw
        dk = st.unwindows(torch.matmul(ds.transpose(-1, -2), st.rows(q)).mul_(scale))
        dv = st.unwindows(torch.matmul(p.transpose(-1, -2), dzb))
        dqa = st.per_distance(ds)  # (B, H, T, 2k+1)
        # the far regions: the kernel's backward as part of the whole softmax
        rows_v = [table_v[0], table_v[R - 1]] if table_v is not None else [0.0, 0.0]
        for side, col in ((0, 0), (1, R - 1)):
            dqa[..., col] += mass[side, ..., 0] * (dz * (far_out[side] + rows_v[side] - z)).sum(-1)
        regions.far_backward(mass * dz, q, k, v, torch.stack([z - rows_v[0], z - rows_v[1]]),
                             kernel_lse, key_padding_mask, block, kmax, scale, dq, dk, dv)
        dq += torch.matmul(dqa, table_k) * scale
        dtable_k = (dqa.flatten(0, 2).t() @ q.flatten(0, 2)) * scale
        dtable_v = None
        if table_v is not None:
            per_row = st.per_distance(p)
            per_row[..., 0] += mass[0, ..., 0]
            per_row[..., R - 1] += mass[1, ..., 0]
            dtable_v = per_row.flatten(0, 2).t() @ dz.flatten(0, 2)
        return dq, dk, dv, dtable_k, dtable_v, None, None, None, None


# ---------------------------------------------------------------------------
# The query-block path (CPU training: no probability matrix kept for the backward)
# ---------------------------------------------------------------------------
def blocked_relpos_attention(q: Tensor, k: Tensor, v: Tensor, rel_keys: Tensor,
                             rel_values: Tensor, kmax: int, q_pos: Tensor, k_pos: Tensor,
                             key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor],
                             scale: float, block: Optional[int] = None) -> Tensor:
    """Shaw et al. keys and values, ``CPU_BLOCK`` query rows at a time, forward and backward
    (:class:`_QueryBlocks`): the (B, H, T, S) scores and probabilities of one block exist at
    a time, and only the output and the log-sum-exp per query are kept for the backward,
    which recomputes each block's probabilities (as flash attention does).

    Per block the relative terms need only 2k+1 values per query, never a (T, S, d) tensor:
    the key term gathers ``q_i . w_K[d]`` per clipped distance d, and the value term is the
    probability mass per clipped distance times the table,
    ``sum_j p_ij w_V[clip(j - i)] = sum_d (sum_{j: clip(j - i) = d} p_ij) w_V[d]``.
    The same sums as the explicit path, in another order; no attention dropout (the chooser
    sends a layer with attention dropout to the explicit path).

    q: (B, H, T, D) at ``q_pos``; k, v: (B, H, S, D) at ``k_pos``; key_padding_mask (B, S)
    True = pad; attn_mask fairseq's (T, S) float (0 / -inf) or bool (True = masked)."""
    idx = clipped_distance_index(q_pos, k_pos, kmax)  # (T, S)
    bias, allowed = None, None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            allowed = ~attn_mask
        else:
            bias = attn_mask.to(q.dtype)
    if key_padding_mask is not None:
        keep = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, S)
        allowed = keep if allowed is None else allowed & keep
    return _QueryBlocks.apply(q, k, v, rel_keys.to(q.dtype), rel_values.to(q.dtype), idx, bias,
                              allowed, scale, block or CPU_BLOCK)


def _rows(x: Optional[Tensor], rows: slice) -> Optional[Tensor]:
    """The block's rows of a (.., T|1, S) mask or bias."""
    return x if x is None or x.size(-2) == 1 else x[..., rows, :]


class _QueryBlocks(torch.autograd.Function):
    """Forward and backward of :func:`blocked_relpos_attention`, one query block at a time."""

    @staticmethod
    def _probs(q, kT, table_k, idx, bias, allowed, scale, lse=None):
        """Scores of a block (B, H, tb, S), or its probabilities given the log-sum-exp.
        kT: the keys transposed, (B, H, D, S) contiguous (a transposed view is several
        times slower in CPU matmuls)."""
        B, H, tb, _ = q.shape
        where = idx.expand(B, H, tb, kT.size(3))
        s = torch.matmul(q, kT)
        s = (s + torch.matmul(q, table_k.t()).gather(-1, where)) * scale
        if bias is not None:
            s = s + bias
        if allowed is not None:
            s = s.masked_fill(~allowed, float("-inf"))
        return (s, where) if lse is None else (torch.exp(s - lse[..., None]), where)

    @staticmethod
    def forward(ctx, q, k, v, table_k, table_v, idx, bias, allowed, scale, block):
        B, H, T, D = q.shape
        R = table_k.size(0)
        out = q.new_empty(B, H, T, D)
        kT = k.transpose(-1, -2).contiguous()
        lse = q.new_empty(B, H, T, dtype=torch.promote_types(q.dtype, torch.float32))
        for t0 in range(0, T, block):
            rows = slice(t0, min(T, t0 + block))
            s, where = _QueryBlocks._probs(q[:, :, rows], kT, table_k, idx[rows], _rows(bias, rows),
                                           _rows(allowed, rows), scale)
            block_lse = torch.logsumexp(s.to(lse.dtype), dim=-1)
            # a row a mask empties (every key -inf) gets lse = +inf: zero probabilities, zero
            # output and gradients (the core's convention), not exp(-inf - -inf) = NaN
            lse[:, :, rows] = block_lse.masked_fill(torch.isneginf(block_lse), float("inf"))
            p = torch.exp(s - lse[:, :, rows, None]).to(q.dtype)
            mass = p.new_zeros(B, H, p.size(2), R).scatter_add_(-1, where, p)
            out[:, :, rows] = torch.matmul(p, v) + torch.matmul(mass, table_v)
        ctx.save_for_backward(q, k, v, table_k, table_v, idx, bias, allowed, out, lse)
        ctx.scale, ctx.block = scale, block
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, table_k, table_v, idx, bias, allowed, out, lse = ctx.saved_tensors
        scale, block = ctx.scale, ctx.block
        B, H, T, D = q.shape
        R = table_k.size(0)
        kT, vT = k.transpose(-1, -2).contiguous(), v.transpose(-1, -2).contiguous()
        # gradients of k and v accumulated transposed: contiguous operands in every matmul
        dq, dkT, dvT = torch.zeros_like(q), torch.zeros_like(kT), torch.zeros_like(vT)
        dtable_k, dtable_v = torch.zeros_like(table_k), torch.zeros_like(table_v)
        delta = (dout * out).sum(-1)  # (B, H, T): sum_j p_ij dp_ij
        for t0 in range(0, T, block):
            rows = slice(t0, min(T, t0 + block))
            qb, do = q[:, :, rows], dout[:, :, rows]
            p, where = _QueryBlocks._probs(qb, kT, table_k, idx[rows], _rows(bias, rows),
                                           _rows(allowed, rows), scale, lse[:, :, rows].to(q.dtype))
            dvT += torch.matmul(do.transpose(-1, -2).contiguous(), p)
            mass = p.new_zeros(p.shape[:-1] + (R,)).scatter_add_(-1, where, p)
            dtable_v += mass.flatten(0, 2).t() @ do.flatten(0, 2)
            dp = torch.matmul(do, vT) + torch.matmul(do, table_v.t()).gather(-1, where)
            ds = p * (dp - delta[:, :, rows, None]) * scale  # d loss / d (q.k + q.w_K)
            dqa = ds.new_zeros(ds.shape[:-1] + (R,)).scatter_add_(-1, where, ds)
            dq[:, :, rows] = torch.matmul(ds, k) + torch.matmul(dqa, table_k)
            dkT += torch.matmul(qb.transpose(-1, -2).contiguous(), ds)
            dtable_k += dqa.flatten(0, 2).t() @ qb.flatten(0, 2)
        return dq, dkT.transpose(-1, -2), dvT.transpose(-1, -2), dtable_k, dtable_v, None, None, None, None, None


# ---------------------------------------------------------------------------
# The flex_attention path (keys and values without the probability matrix)
# ---------------------------------------------------------------------------
def band_scores(q: Tensor, k: Tensor, start: int, half: int, block: int = BAND_BLOCK) -> Tensor:
    """``q_i . k_{start + i + d}`` for d = -half..half as (B, H, T, 2 half + 1); zero where
    the key position falls outside [0, S).

    Query blocks of ``block`` rows against their ``block + 2 half`` keys (one batched
    matmul), then each row's diagonal band is cut out with a skew (flat view with row
    stride ``W + 1``): no (T, S) matrix, no per-query copy of the keys."""
    B, H, T, D = q.shape
    S = k.size(2)
    block = max(1, min(block, T))
    nb = -(-T // block)
    Tp = nb * block
    W = block + 2 * half
    kp = F.pad(k, (0, 0, half, max(0, start + Tp + half - S)))  # kp[x] = key x - half
    kw = kp[:, :, start: start + Tp + 2 * half].unfold(2, W, block)  # (B, H, nb, D, W)
    qb = F.pad(q, (0, 0, 0, Tp - T)).view(B, H, nb, block, D)
    sc = torch.matmul(qb, kw)  # (B, H, nb, block, W): row r, column c = key b*block + r + c - half
    flat = F.pad(sc.reshape(B, H, nb, block * W), (0, block))
    band = flat.view(B, H, nb, block, W + 1)[..., : 2 * half + 1]  # column d + half
    return band.reshape(B, H, Tp, 2 * half + 1)[:, :, :T]


def relpos_attention(q: Tensor, k: Tensor, v: Tensor, rel_keys: Tensor,
                     rel_values: Optional[Tensor], kmax: int, start: int,
                     key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor],
                     scale: float, compile: str = "none") -> Tensor:
    """Shaw et al. relative positions through flex_attention, keys AND values.

    The key term is a ``score_mod``: ``score + qa[b, h, i, clip(j - i, k) + k]`` with
    ``qa = scale * q w_K^T`` (B, H, T, 2k+1). The value term ``sum_j p_ij w_V[clip(j - i, k)]``
    is rebuilt from the log-sum-exp ``lse`` that the fused call returns:

    - inside the clip window (|j - i| < k) each distance has one key, so
      ``p_ij = exp(e_ij - lse_i)`` with ``e_ij`` recomputed for that band only
      (:func:`band_scores`, O(T k D) work, O(T k) memory);
    - the right tail (j - i >= k) needs only its total mass: a second fused call restricted
      to that tail (block-sparse; empty under a causal mask) gives ``lse_R`` and
      ``M_R = exp(lse_R - lse)``;
    - the left tail is what remains: ``M_L = 1 - M_R - sum(band)``.

    Then ``value_term = band @ w_V[1:2k] + M_L w_V[0] + M_R w_V[2k]``. Exact (the same sums,
    regrouped); gradients flow through ``out``, ``lse`` and ``qa`` (flex supports both).

    q: (B, H, T, D) at positions start..start+T-1; k, v: (B, H, S, D) at 0..S-1;
    rel_keys / rel_values: (2 kmax + 1, D) tables (rel_values None: keys only);
    key_padding_mask (B, S) True = pad; attn_mask fairseq's (T, S) float (0 / -inf) or
    bool (True = masked); compile: ``--attn-flex-compile``. Returns (B, H, T, D)."""
    B, H, T, D = q.shape
    S = k.size(2)
    R = 2 * kmax + 1
    qa = torch.matmul(q, rel_keys.to(q.dtype).t()) * scale  # (B, H, T, 2k+1)
    add, keep = flex.split_attn_mask(attn_mask)
    kpm = key_padding_mask
    offset = torch.tensor(start, device=q.device)  # a tensor: no recompilation per decoding step
    clip = torch.tensor(kmax, device=q.device)  # a tensor: inductor lowers no captured number
    score_mod = (relpos_score_mod(qa, offset, clip) if add is None
                 else relpos_add_score_mod(qa, add, offset, clip))
    allowed, block_mask = flex.layer_mask(kpm, keep, B, T, S, q.device, "relpos", attn_mask)
    if rel_values is None:
        return flex.call(q, k, v, score_mod, block_mask, scale, compile=compile)
    out, lse = flex.call(q, k, v, score_mod, block_mask, scale, lse=True,
                         compile=compile)  # lse (B, H, T) fp32
    acc = torch.promote_types(q.dtype, torch.float32)  # fp32 for fp16/bf16, else q's
    lse = lse.to(acc)
    has_key = torch.isfinite(lse)
    lse_safe = torch.where(has_key, lse, torch.zeros_like(lse))

    # inside the window: one key per distance d = -(k-1)..k-1
    half = kmax - 1
    d = torch.arange(-half, half + 1, device=q.device)
    j = start + torch.arange(T, device=q.device)[:, None] + d  # (T, 2 half + 1) key position
    valid = ((j >= 0) & (j < S))[None, None]  # (1, 1, T, W)
    jc = j.clamp(0, S - 1)
    e = band_scores(q, k, start, half).to(acc) * scale + qa[..., 1: R - 1].to(acc)
    if add is not None:
        e = e + add.to(acc).gather(1, jc)
    if keep is not None:
        valid = valid & keep.gather(1, jc)
    if kpm is not None:
        valid = valid & ~kpm[:, jc][:, None]  # (B, 1, T, W)
    e = torch.where(valid, e - lse_safe[..., None], torch.full_like(e, float("-inf")))
    band = torch.exp(e)  # (B, H, T, 2 half + 1) probabilities of the window's keys

    # right tail j - i >= k: its total mass from a second call restricted to it
    mass_right = torch.zeros_like(lse_safe)
    if start + kmax <= S - 1:  # some query has a key k or more to its right
        tail_mask = flex.block_mask(right_tail_mod(allowed, offset, clip), B, T, S, q.device,
                                    ("relpos_right_tail", start, kmax, kpm is None),
                                    (kpm, attn_mask))
        # only the lse is used: a narrow zero value keeps the p @ v part of the call small
        v0 = v.new_zeros(B, H, S, min(D, 16))
        _, lse_r = flex.call(q, k, v0, score_mod, tail_mask, scale, lse=True, compile=compile)
        lse_r = lse_r.to(acc)
        has_tail = torch.isfinite(lse_r) & has_key
        lse_r = torch.where(has_tail, lse_r, lse_safe)
        mass_right = torch.where(has_tail, torch.exp(lse_r - lse_safe), mass_right)
    mass_left = has_key.to(acc) - mass_right - band.sum(-1)

    table = rel_values.to(acc)
    extra = (torch.matmul(band, table[1: R - 1])
             + mass_left[..., None] * table[0] + mass_right[..., None] * table[R - 1])
    return out + extra.to(out.dtype)


# score_mod / mask_mod forms: module-level, every captured value a tensor (or the model's
# constant k), so that compiled flex_attention sees one form per layer configuration
# The score_mod / mask_mod forms capture tensors only (offset, kmax as 0-dim tensors):
# inductor cannot lower a captured Python number under dynamic shapes (it becomes a symbol
# without a dtype: "'ShapeAsConstantBuffer' object has no attribute 'dtype'", seen on an
# H200 with torch 2.11), and flex.call refuses one.
def relpos_score_mod(qa: Tensor, offset: Tensor, kmax: Tensor):
    """``score + qa[b, h, i, clip(j - i - offset, k) + k]``."""
    def score_mod(score, b, h, i, j):
        return score + qa[b, h, i, torch.clamp(j - i - offset, -kmax, kmax) + kmax]

    return score_mod


def relpos_add_score_mod(qa: Tensor, add: Tensor, offset: Tensor, kmax: Tensor):
    """:func:`relpos_score_mod` plus fairseq's additive mask ``add[i, j]``."""
    def score_mod(score, b, h, i, j):
        return score + qa[b, h, i, torch.clamp(j - i - offset, -kmax, kmax) + kmax] + add[i, j]

    return score_mod


def right_tail_mod(allowed, offset: Tensor, kmax: Tensor):
    """``mask_mod``: ``allowed`` and the key at least k to the right of the query."""
    def mask_mod(b, h, i, j):
        return allowed(b, h, i, j) & (j - i - offset >= kmax)

    return mask_mod
