"""The attention paths and the one chooser between them.

Each path lives in its own module, computes a layer's attention itself (``apply``) and
declares what it supports as data, read by one ``not_supported_reasons``
(:mod:`.base`, as xformers' ``AttentionOpBase``):

1. ``flex piece`` (:mod:`.flex`): the layer's only piece computes the whole attention
   through flex_attention (its ``flex_forward``: relpos kv/tied, alibi), no (B, H, T, S) tensor;
2. ``flex band`` (:mod:`.flex`): a band-masked layer (a piece declares ``band_half``: CSAN
   windows) through block-sparse flex_attention, the blocks outside the band skipped;
3. ``region split`` (:mod:`.regions`): the layer's only piece computes an encoder
   self-attention from the far left, band and far right keys of each query, the far ones
   through torch's CPU flash kernel (relpos on CPU);
4. ``query blocks`` (:mod:`.blocks`): the layer's only piece computes the whole attention
   in query blocks (relpos kv/tied on CPU: what the region split does not run);
5. ``distance bias`` (:mod:`.distance_bias`): the layer's only piece adds a bias of the
   key-query distance to an encoder self-attention, run by torch's CPU flash kernel with a
   blocked backward (and the bias's gradient where it learns: t5bias; alibi's is fixed; CPU);
6. ``block-local`` (:mod:`.local`): the band with query blocks through SDPA;
7. ``fused`` (:mod:`.sdpa`): ``scaled_dot_product_attention`` with the pieces' bias and mask;
8. ``explicit`` (:mod:`.explicit`): the probability matrix materialised, every hook run
   (the reference); it always can.

``--attn-backend`` orders the paths (:func:`order`, as xformers' dispatch priority list)
and the first one without reasons runs a call: ``auto`` all of them (the flex paths on
CUDA for inference only, the band from ``flex.FLEX_WINDOW_MIN_LEN`` positions, the region split then the
query blocks on CPU from ``BLOCKED_MIN_LEN``, the distance bias on CPU from
``DISTANCE_BIAS_MIN_LEN``), ``flex`` the flex paths on any device then the SDPA ones,
``fused`` the SDPA paths, ``explicit`` the explicit path; every order ends on the
explicit path (``fused``'s only where weights are requested: it refuses, at build, a piece
that needs the probability matrix). A forced backend whose named path cannot
run any layer of the model (``fused`` with a piece that needs the probability matrix,
``flex`` without flex_attention or with attention dropout) is refused at model build, in
one line naming the flag and the path's own reasons (:func:`check_backend`).
"""

from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple

from ..settings import PieceConfigError
from . import flex, local
from .base import CPU, CUDA, Call, Layer, Path, Run  # noqa: F401  (re-exported)
from .blocks import QueryBlocks
from .distance_bias import DistanceBias
from .explicit import Explicit
from .flex import FlexBand, FlexPiece
from .local import BlockLocal
from .regions import RegionSplit
from .sdpa import Fused

BACKENDS = ("auto", "fused", "explicit", "flex")
#: ``auto`` takes the region-split and query-block paths (CPU) from this many query positions
BLOCKED_MIN_LEN = 256
#: ``auto`` takes the distance-bias path (CPU) from this many query positions
DISTANCE_BIAS_MIN_LEN = 128
#: the path each forced backend names (refused at build when it cannot run the model)
NAMED = {"fused": Fused(), "flex": FlexPiece()}


def order(backend: str) -> Tuple[Path, ...]:
    """The paths ``--attn-backend backend`` tries, in order."""
    return _order(backend, *_thresholds())


def choose(layer: Layer, call: Call) -> Path:
    """The first path of the layer's order without reasons (explicit always can)."""
    return _choose(layer, call, _thresholds())


def _thresholds() -> Tuple[int, ...]:
    """Read per call, so that a test may lower them."""
    return local.LOCAL_MIN_LEN, local.BLOCK, flex.FLEX_WINDOW_MIN_LEN, BLOCKED_MIN_LEN, DISTANCE_BIAS_MIN_LEN


@lru_cache(maxsize=None)
def _order(backend: str, local_min: int, block: int, flex_band_min: int, blocked_min: int,
           distance_min: int):
    if backend == "explicit":
        return (Explicit(),)
    sdpa = (BlockLocal(min_len=local_min, block=block), Fused(), Explicit())
    if backend == "fused":
        return sdpa
    if backend == "flex":
        return (FlexPiece(), FlexBand()) + sdpa
    # the flex paths for inference only: their compiled backward failed on an H200 (torch
    # 2.11: a stride assertion at a new batch shape) and trained slower than the SDPA paths
    # (benchmarks/RESULTS.md, "GPU checks"); --attn-backend flex still trains through them
    return (FlexPiece(devices=CUDA, trains=False),
            FlexBand(devices=CUDA, min_len=flex_band_min, trains=False),
            RegionSplit(devices=CPU, min_len=blocked_min), QueryBlocks(devices=CPU, min_len=blocked_min),
            DistanceBias(devices=CPU, min_len=distance_min)) + sdpa


@lru_cache(maxsize=4096)  # the choice is a function of these; a call's lengths repeat over layers and steps
def _choose(layer: Layer, call: Call, thresholds: Tuple[int, ...]) -> Path:
    return next(p for p in _order(layer.backend, *thresholds) if not p.not_supported_reasons(layer, call))


#: ``auto``'s order, every path once
PATHS = order("auto")


def reasons(layer: Layer, call: Call) -> Dict[str, List[str]]:
    """path name -> why it does not run this call (empty: it could), over the layer's order."""
    return {p.name: p.not_supported_reasons(layer, call) for p in order(layer.backend)}


def own_paths(pieces: Sequence) -> Tuple[str, ...]:
    """The declarations of a layer's only piece that a path runs (``flex_path_ok``, ...)."""
    names = [p.own_piece for p in PATHS if p.own_piece]
    return tuple(n for n in names if len(pieces) == 1 and getattr(pieces[0], n))


def why_explicit(layer: Layer) -> Optional[str]:
    """Why a training call of this layer runs the explicit path (``None`` if it does not)."""
    if not any(isinstance(p, Fused) for p in order(layer.backend)):
        return f"--attn-backend {layer.backend}"
    why = Fused().not_supported_reasons(layer, Call())
    return "; ".join(why) if why else None


def backend_refusals(backend: str, needs_probs: Sequence[str], dropout: float) -> List[str]:
    """Why ``--attn-backend backend`` (one of :data:`BACKENDS`) cannot run a model at all:
    the reasons of the path it names (empty: it can)."""
    named = NAMED.get(backend)
    return named.model_reasons(needs_probs, dropout) if named else []


def check_backend(backend: str, needs_probs: Sequence[str], dropout: float) -> None:
    """Refuse a backend that cannot run the model: one line naming the flag and each reason."""
    if backend not in BACKENDS:
        raise PieceConfigError(f"--attn-backend must be one of {list(BACKENDS)} (got {backend!r})")
    refusals = backend_refusals(backend, needs_probs, dropout)
    if refusals:
        raise PieceConfigError(f"--attn-backend {backend}: {'; '.join(refusals)}; "
                               f"--attn-backend auto or explicit runs every layer, on the explicit path where needed")


def check_flex_compile(mode: str) -> None:
    """Refuse an unknown ``--attn-flex-compile`` in one line."""
    if mode not in flex.COMPILE_MODES:
        raise PieceConfigError(f"--attn-flex-compile must be one of {list(flex.COMPILE_MODES)} "
                               f"(got {mode!r})")
