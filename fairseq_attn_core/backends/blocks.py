"""The query-block path: the layer's only piece computes the whole attention a block of
query rows at a time, with a hand-written backward that keeps only the output and the
log-sum-exp per query (relpos kv/tied on CPU: ``blocked_forward``)."""

from .base import PiecePath


class QueryBlocks(PiecePath):
    name = "query blocks"
    own_piece = "blocked_path_ok"
    no_dropout = "the blocks recompute without it"

    def piece_attention(self, piece, q, k, v, ctx, run):
        return piece.blocked_forward(q, k, v, ctx, run.attn_mask, run.scale, run.dropout_p)
