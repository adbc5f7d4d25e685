"""Rotary position embedding (``rope``), Su, Lu, Pan, Murtadha, Wen and Liu 2021,
"RoFormer: Enhanced Transformer with Rotary Position Embedding" (arXiv:2104.09864).

Queries and keys of every head are rotated by their position before the dot
product, pair of dimensions by pair of dimensions (the paper's eq. 34, pairs
``(x_{2i}, x_{2i+1})``)::

    theta_i = base^(-2i / r),                    i = 0 .. r/2 - 1
    f(x, m)_{2i}   = x_{2i} cos(m theta_i) - x_{2i+1} sin(m theta_i)
    f(x, m)_{2i+1} = x_{2i} sin(m theta_i) + x_{2i+1} cos(m theta_i)
    e_mn = f(q_m, m) . f(k_n, n) / sqrt(d)       (depends on n - m only)

``base`` is ``--rope-theta`` (default 10000, the paper's). ``r`` is the number
of rotated dimensions, ``--rope-fraction`` of the head dimension (default 1.0,
the paper), rounded down to an even number; the remaining dimensions pass
unrotated, as GPT-NeoX's ``rotary_pct`` does (the frequencies then use ``r``,
not the head dimension). Values are not rotated. No parameters.

Pairing: neighbouring dimensions (2i, 2i+1), as RoFormer. GPT-NeoX, Hugging Face
and fairseq's own rotary module pair the halves (i, i + r/2): equally RoPE, but a
different function of the same weights (porting q/k projections needs a row
permutation; CTranslate2's ``rotary_interleave=True`` is our pairing).

Positions are the key indices of the padded batch (``q_pos``/``k_pos``): the
score depends on ``n - m`` only, so left or right padding gives the same
output (up to float rounding of the angles). Angles are computed in float64, their cosines
and sines cached per rotation, length, device and dtype (:func:`rotation_tables`: a call
gathers its positions' rows, no trigonometry per call), and the rotation is computed in
float32 (float64 for a float64 model) and cast back, in one elementwise pass of few kernels
(the pairs swapped once, two products and a sum; the same roundings as the paper's formula).

Placement: ``--rope-sides`` (default encoder,decoder), ``--rope-layers``
(default all): every self-attention layer, the paper's setting.
Encoder-decoder attention is fairseq's own and is not rotated (source and
target positions are not on one axis). ``--rope-abs-pos drop`` (default) turns
fairseq's sinusoidal token position embeddings off (RoFormer has none); see
:mod:`..position_method_flags`.

Backends: a ``transform_qkv`` piece, so the layer stays on the fused SDPA path
(flash / memory-efficient kernels); explicit path too. Incremental decoding:
the cache keeps unrotated keys; each step rotates them by their positions, so a
cached step scores exactly as the full forward. With 2D-CSAN the keys of
neighbouring heads are widened after the rotation, so every slot's key carries
its own position's rotation and the score still depends on n - m only.
"""

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from ..piece import AttentionPiece, AttentionSite, Float, PieceConfigError, register_piece
from ..position_method_flags import placement_settings, position_conflicts, replace_token_positions


def rotated_dims(head_dim: int, fraction: float) -> int:
    """Even number of rotated dimensions: ``fraction * head_dim`` rounded down to even."""
    return 2 * int(fraction * head_dim // 2)


#: (rot, base, device, dtype) -> (cos, signed sin) tables (n, rot) for the positions 0..n-1
_TABLES: Dict[Tuple[int, float, str, torch.dtype], Tuple[Tensor, Tensor]] = {}


def rotation_tables(length: int, rot: int, base: float, device, dtype) -> Tuple[Tensor, Tensor]:
    """(cos, sin) of the angles ``m theta_i`` for the positions m < ``length`` (at least), each
    (n, rot) with every pair's value twice, laid out for :func:`rotate`: ``cos`` as
    ``(cos, cos)``, ``sin`` signed as ``(-sin, sin)``. The angles in float64, as the paper's
    formula, then cast to ``dtype``; cached, grown to the next power of two."""
    key = (rot, float(base), str(device), dtype)
    tables = _TABLES.get(key)
    if tables is None or tables[0].size(0) < length:
        n = 1 << max(0, length - 1).bit_length()
        inv_freq = base ** (-torch.arange(0, rot, 2, device=device, dtype=torch.float64) / rot)
        angle = torch.arange(n, device=device, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (n, rot/2)
        cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
        tables = _TABLES[key] = (torch.stack((cos, cos), -1).flatten(-2),
                                 torch.stack((-sin, sin), -1).flatten(-2))
    return tables


def rotate(x: Tensor, pos: Tensor, rot: int, base: float, length: Optional[int] = None) -> Tensor:
    """Rotate the first ``rot`` dimensions of x (..., L, D) by positions ``pos`` (L,), all below
    ``length`` (default: read from ``pos``). Pair (x1, x2) becomes
    ``(x1 cos - x2 sin, x2 cos + x1 sin)``: x times ``(cos, cos)`` plus the swapped pair
    ``(x2, x1)`` times ``(-sin, sin)``."""
    acc = torch.promote_types(x.dtype, torch.float32)
    if length is None:
        length = int(pos.max()) + 1 if pos.numel() else 0
    cos, sin = (t.index_select(0, pos) for t in rotation_tables(length, rot, base, x.device, acc))
    xr = x[..., :rot].to(acc)
    swapped = xr.unflatten(-1, (rot // 2, 2)).flip(-1).flatten(-2)  # (x2, x1) per pair: a copy
    out = (xr * cos).add_(swapped.mul_(sin)).to(x.dtype)
    return out if rot == x.size(-1) else torch.cat((out, x[..., rot:]), dim=-1)


@register_piece
class RotaryPositions(AttentionPiece):
    """RoPE (Su et al. 2021): q and k rotated by position. See module docstring."""

    name = "rope"
    conflicts = position_conflicts("rope")
    test_flags = {"rope_layers": "0", "rope_fraction": 0.5}

    settings = (
        Float("rope_theta", 10000.0, positive=True, metavar="BASE",
              help="rotary positions: frequency base, a finite number > 0 (default 10000.0, "
                   "the paper)"),
        Float("rope_fraction", 1.0, positive=True, hi=1.0, metavar="F",
              help="rotary positions: fraction of each head's dimensions rotated, in (0, 1], "
                   "rounded down to an even count (default 1.0)"),
    ) + placement_settings("rope", "rotary position embedding")

    @classmethod
    def check_combination(cls, args):
        replace_token_positions(cls, args, "rope", "rotary position embedding")

    @classmethod
    def from_args(cls, site: AttentionSite, args):
        return cls(site, float(args.rope_theta), float(args.rope_fraction))

    def __init__(self, site: AttentionSite, theta: float = 10000.0, fraction: float = 1.0):
        super().__init__(site)
        self.theta = theta
        self.rot = rotated_dims(site.head_dim, fraction)
        if self.rot == 0:
            raise PieceConfigError(
                f"--rope-fraction {fraction} rotates no pair of the {site.head_dim} dimensions of a "
                f"head; allowed: at least 2 / {site.head_dim}")

    def transform_qkv(self, q: Tensor, k: Tensor, v: Tensor, ctx):
        n = ctx.k_pos.numel()  # the keys are at 0..S-1, the queries among them: all below S
        return (rotate(q, ctx.q_pos, self.rot, self.theta, n),
                rotate(k, ctx.k_pos, self.rot, self.theta, n), v)

    def extra_repr(self):
        return (f"theta={self.theta:g}, rotated={self.rot}/{self.site.head_dim}, "
                f"{self.site.side} layer {self.site.layer_idx}")
