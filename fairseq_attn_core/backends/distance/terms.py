"""The declaration: what a position piece says of its terms of the key-query distance ``j - i``
(:class:`DistanceTerms`, returned by ``AttentionPiece.distance_terms``), what the chooser knows
of them at build (:class:`DistanceForm`), and the rules every kernel of the family shares (the
empty-row rule, the query spans).

* relpos (Shaw et al. 2018): a key table and a value table ``(2k + 1, D)`` and the clip k,
  ``e_ij += scale q_i . w_K[clip(j - i)]``, ``z_i += sum_j p_ij w_V[clip(j - i)]``;
* t5bias: a bias table ``(N, H)`` read by bucket, ``e_ij += b[bucket(j - i), h]``;
* alibi: fixed slopes, ``e_ij -= m_h |j - i|``.
"""

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

INF = float("inf")


# ---------------------------------------------------------------------------
# The declaration
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class DistanceForm:
    """What the chooser knows of a layer's distance terms at build: no tensors."""

    clip: Optional[int] = None  # relpos: k
    keys: bool = False  # a key table
    values: bool = False  # a value table
    bias: Optional[str] = None  # "buckets" (t5bias) or "slopes" (alibi)

    # the paths each form opens (read by the paths' ``takes``, see base.Path)
    @property
    def flex(self) -> bool:
        """flex_attention without the probability matrix: a value term rebuilt from the
        log-sum-exp, or fixed slopes in the score_mod (a learned table's gradient inside a
        compiled score_mod is unmeasured: t5bias keeps the distance-bias path)."""
        return self.values or self.bias == "slopes"

    @property
    def far_split(self) -> bool:
        """The far-key split needs a clip: beyond it the term is one constant per query."""
        return self.clip is not None

    @property
    def query_blocks(self) -> bool:
        """A value term: the query blocks keep no probability matrix for the backward
        (keys only run fused)."""
        return self.values

    @property
    def learned_bias(self) -> bool:
        """A bias table learned by bucket (t5bias): the SDPA paths train it through a bias that
        requires grad (alibi's slopes are fixed)."""
        return self.bias == "buckets"

    @property
    def triton(self) -> bool:
        """What the Triton kernels run: a bias of the distance, or Shaw's tables, not both
        (their backward_q would count the far tiles' row sums twice)."""
        return (self.bias is not None) != self.keys

    @property
    def bias_kernel(self) -> bool:
        """A bias of the distance alone (no table read with q): the fused kernel's mask."""
        return self.bias is not None and not (self.keys or self.values)


@dataclass(frozen=True, eq=False)
class DistanceTerms:
    """A piece's terms of the key-query distance ``j - i`` (see the module docstring)."""

    key_table: Optional[Tensor] = None  # (2 clip + 1, D), with clip
    value_table: Optional[Tensor] = None  # (2 clip + 1, D), with a key table
    clip: Optional[int] = None
    bias_table: Optional[Tensor] = None  # (N, H)
    bucket: Optional[Callable[[Tensor], Tensor]] = None  # distances (long) -> bucket rows
    slopes: Optional[Tuple[float, ...]] = None  # (H,)

    def __post_init__(self):
        tables = self.key_table is not None
        if tables != (self.clip is not None) or (self.value_table is not None and not tables):
            raise ValueError("DistanceTerms: a key table and its clip come together; a value table needs them")
        if (self.bias_table is None) != (self.bucket is None):
            raise ValueError("DistanceTerms: a bias table and its bucket function come together")
        if self.bias_table is not None and self.slopes is not None:
            raise ValueError("DistanceTerms: a bias table or slopes, not both")

    @property
    def form(self) -> DistanceForm:
        bias = "buckets" if self.bias_table is not None else "slopes" if self.slopes is not None else None
        return DistanceForm(self.clip, self.key_table is not None, self.value_table is not None, bias)

    def rows(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """(T, S) long: ``clip(j - i, k) + k``, the table row of each pair."""
        return (k_pos[None, :] - q_pos[:, None]).clamp(-self.clip, self.clip) + self.clip

    def bias(self, distances: Tensor, dtype: torch.dtype) -> Optional[Tensor]:
        """(H, *distances.shape): the bias of each head at the given key - query distances,
        the slopes' penalty in ``dtype`` promoted to float32 at least (``None``: no bias)."""
        if self.bias_table is not None:
            return self.bias_table[self.bucket(distances)].movedim(-1, 0)
        if self.slopes is None:
            return None
        m = torch.tensor(self.slopes, dtype=torch.promote_types(dtype, torch.float32),
                         device=distances.device)
        return -m.view(-1, *[1] * distances.dim()) * distances.abs().to(m.dtype)

    def score_bias(self, q: Tensor, q_pos: Tensor, k_pos: Tensor, scale: float) -> Optional[Tensor]:
        """The term added to ``scale q_i . k_j``, (B|1, H, T, S) in q's dtype (the explicit
        and fused paths' hook)."""
        out = None
        if self.key_table is not None:
            B, H, T, _ = q.shape
            idx = self.rows(q_pos, k_pos)
            # q against every table row once, then pick the row of each (i, j)
            q_rows = torch.matmul(q, self.key_table.to(q.dtype).t())  # (B, H, T, 2k+1)
            out = q_rows.gather(-1, idx.expand(B, H, T, idx.size(-1))) * scale
        bias = self.bias(k_pos[None, :] - q_pos[:, None], q.dtype)
        if bias is not None:
            out = bias[None].to(q.dtype) if out is None else out + bias[None].to(q.dtype)
        return out

    def value_term(self, probs: Tensor, q_pos: Tensor, k_pos: Tensor) -> Optional[Tensor]:
        """``sum_j p_ij w_V[clip(j - i)]`` (B, H, T, D) from probabilities (B, H, T, S)."""
        if self.value_table is None:
            return None
        B, H, T, S = probs.shape
        idx = self.rows(q_pos, k_pos).expand(B, H, T, S)
        # sum the probabilities falling on each table row, then one small matmul
        return torch.matmul(per_row(probs, idx, 2 * self.clip + 1), self.value_table.to(probs.dtype))



def per_row(x: Tensor, idx: Tensor, rows: int) -> Tensor:
    """``x`` (..., S) summed per table row ``idx`` (..., S): (..., rows)."""
    return x.new_zeros(x.shape[:-1] + (rows,)).scatter_add_(-1, idx, x)



def without_keys(lse: Tensor, empty: Tensor) -> Tensor:
    """The empty-row rule, once for every forward: a query without any allowed key (``empty``)
    gets log-sum-exp +inf, so that every recomputed probability ``exp(s - lse)`` is 0 and its
    output and gradients are zeros (the core's convention), never ``exp(-inf - -inf)`` = NaN."""
    return lse.masked_fill(empty, INF)


def spans(T: int, block: int) -> Tuple[Tuple[int, int], ...]:
    return tuple((a, min(T, a + block)) for a in range(0, T, block))

