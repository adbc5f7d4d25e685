"""The attention core and its composable pieces: plain torch, no fairseq import.

A piece in a torch model: ``SelfAttention(embed_dim, heads, site, pieces=build_pieces(args, site))``
with ``args`` holding the pieces' flags (:func:`attention_defaults` fills the rest). The fairseq
plugin (:mod:`fairseq_attn_plugins`) wraps it in its model.
"""

from . import pieces  # noqa: F401  (registers every piece in pieces/)
from .core import BACKENDS, SelfAttention
from .piece import (
    PIECES,
    AttentionContext,
    AttentionPiece,
    AttentionSite,
    PieceConfigError,
    parse_layer_spec,
    register_piece,
)
from .flags import add_attention_args, attention_defaults, build_pieces, selected_pieces, validate_attention_args

__all__ = [
    "BACKENDS",
    "PIECES",
    "AttentionContext",
    "AttentionPiece",
    "AttentionSite",
    "PieceConfigError",
    "SelfAttention",
    "add_attention_args",
    "attention_defaults",
    "build_pieces",
    "parse_layer_spec",
    "register_piece",
    "selected_pieces",
    "validate_attention_args",
]
