"""Per-head statistics of attention probabilities (the analysis of DropAttention).

DropAttention (Lin et al. 2019, "DropAttention: A Regularization Method for
Fully-Connected Self-Attention Networks", arXiv:1907.11065) analyses a trained
model by how peaked each head's attention is (entropy) and how much the heads
of a layer differ from each other, the latter measured as in Li et al. 2018
("Multi-Head Attention with Disagreement Regularization", EMNLP,
arXiv:1810.10183). All three statistics take the probabilities of one layer,
``P`` of shape ``(H, T, S)`` (head, query, key; rows sum to 1, or to 0 for a
query with no key), and return one value per head. Only rows with mass
(``sum_j P[h, i, j] > 0``) count; ``0 log 0 = 0``. Natural logarithms.

entropy (peakedness; larger = flatter)::

    Ent(h) = 1/|R| sum_{i in R} - sum_j P[h,i,j] log P[h,i,j]

Div (mean divergence of a head from the other heads; 0 = all heads equal).
The Jensen-Shannon divergence is used because it stays finite when heads
attend to different key sets (masks/windows)::

    M = (P[h,i] + P[g,i]) / 2
    JS(h, g, i) = 1/2 KL(P[h,i] || M) + 1/2 KL(P[g,i] || M)
    Div(h) = 1/(H-1) sum_{g != h} 1/|R| sum_{i in R} JS(h, g, i)

disagreement on attended positions (Li et al. 2018, eq. "D_position":
``D = -1/H^2 sum_h sum_g |A^h (.) A^g|`` with ``(.)`` the element-wise
product and ``|.|`` the sum of all elements), taken per head and per query
row so that values are comparable across sentence lengths::

    Dis(h) = - 1/H sum_g 1/|R| sum_{i in R} sum_j P[h,i,j] P[g,i,j]

so that ``mean_h Dis(h)`` is Li et al.'s layer value divided by the number of
rows. It lies in [-1, 0): -1/H for one-hot heads on disjoint positions, -1
when every head puts all its mass on the same key; larger = more disagreement.

The rows ``R`` are those where *every* head has mass (a row a mask empties is
left out, for all heads, so the heads stay comparable).
"""

from typing import Dict

import torch
from torch import Tensor


def _check(probs: Tensor) -> Tensor:
    if probs.dim() != 3:
        raise ValueError(f"expected attention probabilities of shape (H, T, S), got {tuple(probs.shape)}")
    return probs.to(torch.float64)


def _rows(p: Tensor) -> Tensor:
    """(T,) bool: rows where every head has probability mass."""
    return (p.sum(dim=-1) > 0).all(dim=0)


def _xlogy(x: Tensor, y: Tensor) -> Tensor:
    return torch.where(x > 0, x * torch.log(torch.where(x > 0, y, torch.ones_like(y))), torch.zeros_like(x))


def head_entropy(probs: Tensor) -> Tensor:
    """(H,) mean row entropy of each head, in nats (see module docstring)."""
    p = _check(probs)
    rows = _rows(p)
    ent = -_xlogy(p, p).sum(dim=-1)  # (H, T)
    return ent[:, rows].mean(dim=1)


def head_div(probs: Tensor) -> Tensor:
    """(H,) mean Jensen-Shannon divergence of each head from the other heads."""
    p = _check(probs)
    H = p.size(0)
    if H < 2:
        return torch.zeros(H, dtype=p.dtype)
    rows = _rows(p)
    p = p[:, rows]  # (H, R, S)
    a, b = p[:, None], p[None, :]  # (H, 1, R, S), (1, H, R, S)
    m = (a + b) / 2
    js = 0.5 * _xlogy(a, a / m.clamp_min(1e-300)).sum(-1) + 0.5 * _xlogy(b, b / m.clamp_min(1e-300)).sum(-1)
    js = js.mean(dim=-1)  # (H, H), zero diagonal
    return js.sum(dim=1) / (H - 1)


def head_disagreement(probs: Tensor) -> Tensor:
    """(H,) Li et al. (2018) position disagreement of each head with all heads."""
    p = _check(probs)
    H = p.size(0)
    rows = _rows(p)
    p = p[:, rows]
    overlap = torch.einsum("hrs,grs->hgr", p, p).mean(dim=-1)  # (H, H)
    return -overlap.sum(dim=1) / H


def head_stats(probs: Tensor) -> Dict[str, Tensor]:
    """All three statistics, each ``(H,)`` float64."""
    return {
        "entropy": head_entropy(probs),
        "div": head_div(probs),
        "disagreement": head_disagreement(probs),
    }


__all__ = ["head_disagreement", "head_div", "head_entropy", "head_stats"]
