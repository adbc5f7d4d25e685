"""What the reports read from the pieces' declarations, without importing torch when the installed
code has not changed since it was last read: which model flags are piece flags, and the pieces a
run record's model flags make active. The answers are kept in the cache file of :mod:`.arch_names`
(keyed by the code: any change of it reads the declarations again), the pieces of each model under
the sha256 of its flags."""

import hashlib
import json
from typing import Dict, List

from .arch_names import cached_entry, cached_names


class UnknownPieces(ValueError):
    """Model flags the pieces' declarations refuse (a piece unknown to this code)."""


def piece_flag_names() -> List[str]:
    """The attribute of every piece flag (:func:`fairseq_attn_core.flags.piece_flags`)."""
    return cached_names("piece_flags", _read_piece_flags)


def model_pieces(model: Dict) -> Dict:
    """:func:`fairseq_attn_core.catalogue.model_pieces` of a run record's ``model`` (its ``arch``
    included): ``{"arch", "pieces", "pieces_per_layer"}``; UnknownPieces (kept nowhere) for pieces
    unknown here."""
    key = hashlib.sha256(json.dumps(model, sort_keys=True).encode()).hexdigest()
    return cached_entry("model_pieces", key, lambda: _read_model_pieces(model))


def _read_piece_flags() -> List[str]:
    from fairseq_attn_core.flags import piece_flags  # the pieces' declarations (torch)
    return sorted(piece_flags())


def _read_model_pieces(model: Dict) -> Dict:
    from fairseq_attn_core import catalogue  # the pieces' declarations (torch)
    from fairseq_attn_core.piece import PieceConfigError

    try:
        return catalogue.model_pieces(model)
    except PieceConfigError as e:
        raise UnknownPieces(str(e)) from None
