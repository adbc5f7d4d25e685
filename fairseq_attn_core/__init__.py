"""Attention core and its composable pieces."""

from . import pieces  # noqa: F401  (registers every piece in pieces/)
from .core import BACKENDS, PluginSelfAttention
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
    "PluginSelfAttention",
    "add_attention_args",
    "attention_defaults",
    "build_pieces",
    "parse_layer_spec",
    "register_piece",
    "selected_pieces",
    "validate_attention_args",
]
