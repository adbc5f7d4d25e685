"""Positions of tokens within their sentence, whatever the padding side.

fairseq left-pads source sentences by default, so the index of a token in the
padded batch is its position plus the number of pads before it. Pieces that
look positions up in learned tables (``dpi``, ``convattn1d``) must use the
position within the sentence, or the same sentence would get other tables
depending on the batch it lands in.
"""

from typing import Tuple

import torch
from torch import Tensor

from .piece import AttentionContext


def sentence_positions(ctx: AttentionContext) -> Tuple[Tensor, Tensor, Tensor]:
    """Return ``(pos_q (B|1, T), pos_k (B|1, S), lengths (B|1,))``.

    ``pos_k[b, j]`` is the number of real keys before index j in row b (so the
    first real token is position 0); pads get the position of the next real
    token, clamped to the last one (they are masked anyway). ``pos_q`` looks the
    queries up at their key index ``ctx.q_pos`` (self-attention: queries are
    keys; during incremental decoding the query is the last key).
    """
    kpm = ctx.key_padding_mask
    if kpm is None:
        pos_k = ctx.k_pos[None, :]
        lengths = torch.full((1,), ctx.src_len, device=ctx.k_pos.device, dtype=torch.long)
    else:
        real = (~kpm).long()  # (B, S)
        before = real.cumsum(dim=1) - real  # real keys strictly before j
        lengths = real.sum(dim=1)
        pos_k = torch.minimum(before, (lengths - 1).clamp(min=0)[:, None])
    pos_q = pos_k.index_select(1, ctx.q_pos)
    return pos_q, pos_k, lengths
