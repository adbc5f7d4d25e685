"""The distance-bias path: the layer's only piece adds a bias of the key-query distance
alone, ``bias[h, i, j] = R[h, j - i]`` (t5bias's table by bucket, alibi's slopes), to an
encoder self-attention, run by torch's fused kernel with that bias as its additive mask
(:mod:`.distance`, mode ``kernel``).

SDPA with a bias that requires grad leaves the flash kernel for the math path, which keeps
the (B, H, T, S) scores and their gradient. Here the forward is the kernel (bias (1, H, T, S)
built without grad, broadcast over the batch; a sentence with padding gets its own masked
copy), which returns the log-sum-exp per query; the backward keeps q, k, v, the output, the
log-sum-exp and R only, and recomputes, a block of queries at a time,
``P = exp(scale q k^T + bias - lse)`` and ``dS = P (dO v^T - rowsum(dO * O))``, from which
dq, dk, dv and R's gradient, dS summed over the batch and along each diagonal j - i (which
autograd carries to t5bias's table; alibi's slopes are fixed). No (B, H, T, S) tensor is
kept; a block's are (B, H, block, S).

The path runs what it was built for and declares the rest, so that the chooser skips it:
queries = keys without incremental decoding (positions 0..T-1), no fairseq ``attn_mask``, no
attention dropout.
"""

from ..base import PiecePath
from .fused import NO_CPU_KERNEL
from .modes import distance_attention


class DistanceBias(PiecePath):
    name = "distance bias"
    takes = "bias_kernel"
    unavailable = NO_CPU_KERNEL
    no_dropout = "its backward recomputes the probabilities without it"
    queries_are_keys = True
    no_attn_mask = "the kernel's one mask carries the distance bias"

    def piece_attention(self, piece, q, k, v, ctx, run):
        out, run.query_blocks = distance_attention(piece.distance_terms(), q, k, v, run.scale, "kernel",
                                                   run.policy.distance_block, ctx.key_padding_mask)
        return out
