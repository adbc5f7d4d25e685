"""The query-block path: the layer's only piece declares a value table (relpos kv/tied), and
its whole attention runs a block of query rows at a time with a hand-written backward that
keeps only the output and the log-sum-exp per query (:mod:`.distance`, mode ``blocks``; on
CPU what the region split does not run: the decoder's masked self-attention)."""

from .base import PiecePath
from .distance import distance_attention


class QueryBlocks(PiecePath):
    name = "query blocks"
    takes = "query_blocks"
    no_dropout = "the blocks recompute without it"

    def piece_attention(self, piece, q, k, v, ctx, run):
        out, run.query_blocks = distance_attention(piece.distance_terms(), q, k, v, run.scale, "blocks",
                                                   run.policy.query_block, ctx.key_padding_mask,
                                                   run.attn_mask)
        return out
