"""The region-split path: an encoder self-attention of a layer whose only piece declares a
clipped distance (relpos, every mode), split per block of queries into its far left keys,
the strip around the block and its far right keys (:mod:`.distance.far`, mode ``far``).

With a distance clipped at k, query i sees three regions of keys: the far left
``j < i - k``, the band ``|j - i| <= k`` and the far right ``j > i + k``. On a far region the
piece's score term is the same for every key, so the region is plain attention shifted by a
per-query constant: torch's fused kernel runs it (rectangular calls per query block) and
returns its log-sum-exp; the strip of ``block + 2k`` keys is explicit; a hand-written
backward keeps the output, the far outputs and the log-sum-exps.

The path runs what it was built for and declares the rest, so that the chooser skips it:
queries = keys without incremental decoding (so query and key positions are their indices),
no fairseq ``attn_mask``, no attention dropout.
"""

from .base import PiecePath
from .distance import NO_CPU_KERNEL, distance_attention


class RegionSplit(PiecePath):
    name = "region split"
    takes = "far_split"
    unavailable = NO_CPU_KERNEL
    no_dropout = "the far regions run torch's flash kernel without it"
    queries_are_keys = True
    no_attn_mask = "the far regions are every key more than k away in the whole sentence"

    def piece_attention(self, piece, q, k, v, ctx, run):
        out, run.query_blocks = distance_attention(piece.distance_terms(), q, k, v, run.scale, "far",
                                                   run.policy.region_block, ctx.key_padding_mask)
        return out
