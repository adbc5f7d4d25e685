"""The attention paths and the one chooser between them.

A layer's attention runs on one of five paths, tried in this order; each path says why
it cannot run a given call (``not_supported_reasons``, as in xformers), and the first
path without reasons runs it:

1. ``flex piece``: the layer's only piece computes the whole attention through
   flex_attention (its ``flex_forward``: relpos kv/tied, alibi), no (B, H, T, S) tensor;
2. ``flex band``: a band-masked layer (a piece declares ``band_half``: CSAN windows)
   through block-sparse flex_attention (:mod:`.flex`), the blocks outside the band skipped;
3. ``block-local``: the same band with query blocks through SDPA (:mod:`.local`);
4. ``fused``: ``scaled_dot_product_attention`` with the pieces' bias and mask (:mod:`.sdpa`);
5. ``explicit``: the probability matrix materialised, every hook run (the reference,
   in :mod:`..core`); it always can.

``--attn-backend`` picks which paths may run: ``auto`` all of them (the flex paths on
CUDA only, the band from ``flex.FLEX_WINDOW_MIN_LEN`` positions), ``fused`` the SDPA
paths (and explicit where attention weights are requested), ``flex`` all of them on any
device, ``explicit`` the explicit path. A forced backend that cannot run the model at all
(``fused`` with a piece that needs the probability matrix, ``flex`` without
flex_attention or with attention dropout) is refused at model build, naming the flag and
each reason once (:func:`check_backend`).
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..settings import PieceConfigError
from . import flex, local

BACKENDS = ("auto", "fused", "explicit", "flex")


@dataclass(frozen=True)
class Layer:
    """What the chooser knows of a layer, fixed at build."""

    backend: str
    #: pieces that need the probability matrix (no fused path)
    needs_probs: Tuple[str, ...] = ()
    #: the layer's only piece when it has its own flex path (``flex_path_ok``)
    flex_piece: Optional[str] = None
    #: keys only within this many positions of the query (the narrowest declared band)
    band_half: Optional[int] = None
    #: a piece widens the key axis (``expands_kv``)
    widens_kv: bool = False
    #: the layer's only piece when it has a query-block path (``blocked_path_ok``)
    blocked_piece: Optional[str] = None


@dataclass(frozen=True)
class Call:
    """What the chooser knows of one forward call."""

    need_weights: bool = False
    incremental: bool = False
    tgt_len: int = 1
    src_len: int = 1
    dropout_p: float = 0.0
    on_cuda: bool = False


def _flex_common(layer: Layer, call: Call) -> List[str]:
    reasons = []
    if layer.backend not in ("auto", "flex"):
        reasons.append(f"--attn-backend {layer.backend}")
    if not flex.HAVE_FLEX:
        reasons.append("torch has no flex_attention (torch >= 2.9)")
    if call.dropout_p > 0:
        reasons.append(f"attention dropout {call.dropout_p} (flex_attention has none)")
    if call.need_weights:
        reasons.append("attention weights requested")
    if layer.backend == "auto" and not call.on_cuda:
        reasons.append("auto takes flex_attention on CUDA only")
    return reasons


def _fused_common(layer: Layer, call: Call) -> List[str]:
    reasons = []
    if layer.backend == "explicit":
        reasons.append("--attn-backend explicit")
    if layer.needs_probs:
        reasons.append(f"pieces {list(layer.needs_probs)} need the probability matrix")
    if call.need_weights:
        reasons.append("attention weights requested")
    return reasons


def _band_common(layer: Layer, call: Call) -> List[str]:
    reasons = []
    if layer.band_half is None:
        reasons.append("no piece declares a band (band_half)")
    if call.incremental:
        reasons.append("incremental decoding")
    if call.tgt_len != call.src_len:
        reasons.append("queries and keys differ")
    return reasons


class Path:
    """One way to compute a layer's attention."""

    name = ""

    def not_supported_reasons(self, layer: Layer, call: Call) -> List[str]:
        raise NotImplementedError


class FlexPiece(Path):
    name = "flex piece"

    def not_supported_reasons(self, layer, call):
        reasons = _flex_common(layer, call)
        if layer.flex_piece is None:
            reasons.append("no piece with its own flex path is the layer's only piece")
        return reasons


class FlexBand(Path):
    name = "flex band"

    def not_supported_reasons(self, layer, call):
        reasons = _flex_common(layer, call) + _band_common(layer, call)
        if layer.needs_probs:
            reasons.append(f"pieces {list(layer.needs_probs)} need the probability matrix")
        if layer.backend == "auto" and call.tgt_len < flex.FLEX_WINDOW_MIN_LEN:
            reasons.append(f"auto takes the flex band from {flex.FLEX_WINDOW_MIN_LEN} positions")
        return reasons


#: ``auto`` takes the query-block path (CPU) from this many query positions
BLOCKED_MIN_LEN = 256


class QueryBlocks(Path):
    name = "query blocks"

    def not_supported_reasons(self, layer, call):
        reasons = []
        if layer.backend != "auto":
            reasons.append(f"--attn-backend {layer.backend}")
        if layer.blocked_piece is None:
            reasons.append("no piece with a query-block path is the layer's only piece")
        if call.on_cuda:
            reasons.append("a CPU path (CUDA takes flex_attention)")
        if call.need_weights:
            reasons.append("attention weights requested")
        if call.dropout_p > 0:
            reasons.append(f"attention dropout {call.dropout_p} (the blocks recompute without it)")
        if call.tgt_len < BLOCKED_MIN_LEN:
            reasons.append(f"shorter than {BLOCKED_MIN_LEN} positions")
        return reasons


class BlockLocal(Path):
    name = "block-local"

    def not_supported_reasons(self, layer, call):
        reasons = _fused_common(layer, call) + _band_common(layer, call)
        if layer.widens_kv:
            reasons.append("a piece widens the key axis")
        if call.tgt_len < local.LOCAL_MIN_LEN:
            reasons.append(f"shorter than {local.LOCAL_MIN_LEN} positions")
        if layer.band_half is not None and 2 * layer.band_half >= local.BLOCK:
            reasons.append(f"band wider than the {local.BLOCK}-position block")
        return reasons


class Fused(Path):
    name = "fused"

    def not_supported_reasons(self, layer, call):
        return _fused_common(layer, call)


class Explicit(Path):
    name = "explicit"

    def not_supported_reasons(self, layer, call):
        return []


FLEX_PIECE, FLEX_BAND, QUERY_BLOCKS = FlexPiece(), FlexBand(), QueryBlocks()
BLOCK_LOCAL, FUSED, EXPLICIT = BlockLocal(), Fused(), Explicit()
#: the order in which the chooser tries the paths
PATHS = (FLEX_PIECE, FLEX_BAND, QUERY_BLOCKS, BLOCK_LOCAL, FUSED, EXPLICIT)


def choose(layer: Layer, call: Call) -> Path:
    """The first path without reasons (explicit always can)."""
    return next(p for p in PATHS if not p.not_supported_reasons(layer, call))


def reasons(layer: Layer, call: Call) -> Dict[str, List[str]]:
    """path name -> why it does not run this call (empty: it could)."""
    return {p.name: p.not_supported_reasons(layer, call) for p in PATHS}


def why_explicit(layer: Layer) -> Optional[str]:
    """Why a training call of this layer runs the explicit path (``None`` if it does not)."""
    why = FUSED.not_supported_reasons(layer, Call())
    return "; ".join(why) if why else None


def backend_refusals(backend: str, needs_probs: Sequence[str], dropout: float) -> List[str]:
    """Why ``--attn-backend backend`` (one of :data:`BACKENDS`) cannot run a model at all
    (empty: it can)."""
    reasons = []
    if backend == "fused" and needs_probs:
        reasons.append(f"pieces {sorted(set(needs_probs))} need the explicit path with these settings")
    if backend == "flex":
        if not flex.HAVE_FLEX:
            reasons.append("needs torch.nn.attention.flex_attention (torch >= 2.9)")
        if dropout:
            reasons.append(f"flex_attention has no attention dropout; needs --attention-dropout 0 "
                           f"(got {dropout})")
    return reasons


def check_backend(backend: str, needs_probs: Sequence[str], dropout: float) -> None:
    """Refuse a backend that cannot run the model: one line naming the flag and each reason."""
    if backend not in BACKENDS:
        raise PieceConfigError(f"--attn-backend must be one of {list(BACKENDS)} (got {backend!r})")
    refusals = backend_refusals(backend, needs_probs, dropout)
    if refusals:
        raise PieceConfigError(f"--attn-backend {backend}: {'; '.join(refusals)} "
                               f"(--attn-backend auto or explicit runs every layer)")


def check_flex_compile(mode: str) -> None:
    """Refuse an unknown ``--attn-flex-compile`` in one line."""
    if mode not in flex.COMPILE_MODES:
        raise PieceConfigError(f"--attn-flex-compile must be one of {list(flex.COMPILE_MODES)} "
                               f"(got {mode!r})")
