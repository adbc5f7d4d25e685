"""What fairseq's masks and the pieces add to the scores of one call, and the rows they empty.

:class:`Scores` holds the additive ``bias`` and the boolean ``allowed`` mask over
(B|1, H|1, T, S), built from fairseq's ``attn_mask``, the pieces' ``score_bias`` /
``allowed_mask`` hooks and the padding (:meth:`Scores.of`), widened by a piece that
widens the key axis (``AttentionPiece.widen``).

**Emptied rows** are handled here, once. A query whose keys are all masked by a piece
(a CSAN window lying in padding, the first token of a DiSAN forward head) may attend
anywhere (:meth:`Scores.mark_empty_rows`: no NaN from a softmax over nothing), and every
path zeroes what that row produces with :meth:`Scores.zero_empty`: its probabilities
before and after each ``post_softmax`` (explicit path: it feeds nothing into pieces that
mix rows) and its per-head output, before ``combine`` mixes heads. Rows that only
fairseq's masks empty keep fairseq's behaviour.
"""

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor


@dataclass
class Scores:
    #: (B|1, H|1, T, S) float, added to ``scale * q k^T``
    bias: Optional[Tensor] = None
    #: (B|1, H|1, T, S) bool, True = may attend
    allowed: Optional[Tensor] = None
    #: a piece added to ``bias`` / restricted ``allowed`` (not only fairseq's masks)
    piece_bias: bool = False
    piece_mask: bool = False
    #: (B|1, H|1, T, 1) bool: the rows a piece's mask left without any key
    empty: Optional[Tensor] = None

    @classmethod
    def of(cls, pieces, q: Tensor, k: Tensor, ctx, attn_mask: Optional[Tensor]) -> "Scores":
        """fairseq's mask, then every piece's ``score_bias`` and ``allowed_mask``, then the padding."""
        scores = cls()
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                scores.allowed = ~attn_mask
            else:
                scores.bias = attn_mask
        for p in pieces:
            b = p.score_bias(q, k, ctx)
            if b is not None:
                scores.piece_bias = True
                scores.bias = b if scores.bias is None else scores.bias + b
        for p in pieces:
            m = p.allowed_mask(ctx)
            if m is not None:
                scores.restrict(m)
        if ctx.key_padding_mask is not None:
            keep = ~ctx.key_padding_mask[:, None, None, :]  # (B, 1, 1, S)
            scores.allowed = keep if scores.allowed is None else scores.allowed & keep
        if scores.piece_mask and attn_mask is not None and attn_mask.dtype != torch.bool:
            # fairseq's future mask is additive (0 / -inf): make its -inf part boolean too,
            # so that the empty-row rule sees rows emptied by it plus a piece's mask
            finite = attn_mask > float("-inf")
            scores.allowed = scores.allowed & finite
            scores.bias = scores.bias.masked_fill(~finite, 0.0)
        return scores

    def restrict(self, mask: Tensor) -> None:
        """``allowed &= mask``, ``mask`` made by a piece."""
        self.piece_mask = True
        self.allowed = mask if self.allowed is None else self.allowed & mask

    @property
    def piece_made(self) -> bool:
        return self.piece_bias or self.piece_mask

    def mark_empty_rows(self) -> None:
        """Find the rows a piece's mask left without any key and let them attend anywhere."""
        if self.piece_mask and self.allowed is not None:
            self.empty = ~self.allowed.any(dim=-1, keepdim=True)
            self.allowed = self.allowed | self.empty

    def zero_empty(self, x: Tensor) -> Tensor:
        """``x`` (B, H, T, S|D) with the emptied rows zeroed (per head)."""
        return x if self.empty is None else x.masked_fill(self.empty, 0.0)
