"""The attention paths and the one chooser between them.

Each path lives in its own module, computes a layer's attention itself (``apply``) and
declares what it supports as data, read by one ``not_supported_reasons``
(:mod:`.base`, as xformers' ``AttentionOpBase``). Five paths run the distance terms that the
layer's only piece declares (``AttentionPiece.distance_terms``: :mod:`.distance`, one kernel
family; each path takes one property of the terms' form):

1. ``triton distance`` (:mod:`.distance.triton_path`): a bias of the distance (t5bias, alibi)
   or Shaw's key table (relpos k) through the Triton flash kernels, on CUDA with triton
   importable, for the forms the policy's ``triton_forms`` lists (none by default: not yet
   timed on a GPU);
2. ``flex piece`` (:mod:`.distance.flex_forms`): the terms through flex_attention (a value table or
   fixed slopes: relpos kv/tied, alibi), no (B, H, T, S) tensor;
3. ``flex band`` (:mod:`.flex`): a band-masked layer (a piece declares ``band_half``: CSAN
   windows) through block-sparse flex_attention, the blocks outside the band skipped;
4. ``region split`` (:mod:`.regions`): a clip (relpos): an encoder self-attention from the far
   left, strip and far right keys of each query block, the far ones through torch's fused
   kernel (CPU; CUDA: training calls of relpos kv/tied);
5. ``query blocks`` (:mod:`.blocks`): a value table (relpos kv/tied): the whole attention in
   query blocks (CPU: what the region split does not run);
6. ``distance bias`` (:mod:`.distance.bias_path`): a bias of the distance alone (t5bias, alibi): an
   encoder self-attention through torch's fused kernel with the bias as its mask and a
   blocked backward (CPU; CUDA: training calls of t5bias);
7. ``block-local`` (:mod:`.local`): the band with query blocks through SDPA;
8. ``fused`` (:mod:`.sdpa`): ``scaled_dot_product_attention`` with the pieces' bias and mask;
9. ``explicit`` (:mod:`.explicit`): the probability matrix materialised, every hook run
   (the reference); it always can.

``--attn-backend`` orders the paths (:func:`order`, as xformers' dispatch priority list)
and the first one without reasons runs a call: ``auto`` all of them (the flex paths on
CUDA for inference only, the band from the policy's ``flex_band_min_len`` positions, the
region split then the query blocks on CPU from ``blocked_min_len``, the distance bias on CPU
from ``distance_bias_min_len``, and on CUDA the region split and the distance bias for the
training calls of the forms measured faster there, from ``cuda_training_min_len``: every
threshold, block size and the devices and forms of the distance kernels are fields of the
layer's :class:`.policy.Policy`), ``flex`` the flex paths on any device then the SDPA ones,
``fused`` the SDPA paths, ``explicit`` the explicit path; every order ends on the
explicit path (``fused``'s only where weights are requested: it refuses, at build, a piece
that needs the probability matrix). A forced backend whose named path cannot
run any layer of the model (``fused`` with a piece that needs the probability matrix,
``flex`` without flex_attention or with attention dropout) is refused at model build, in
one line naming the flag and the path's own reasons (:func:`check_backend`).

``triton`` forces the Triton path (:data:`.distance.triton_path.FORCED`) for every call it runs,
the SDPA paths for the others (incremental decoding, weights requested); it is refused at model
build without CUDA or triton, with attention dropout, for a model without a piece that
declares distance terms, and per layer (:func:`check_layer`) for pieces whose terms the kernels
do not run or a head size above their largest config. ``tuned`` times the paths that can run
each call's shape class on its first call and keeps the fastest (:mod:`.tuning`).
"""

from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple

from ..settings import PieceConfigError
from . import flex
from .base import CPU, CUDA, Call, Layer, Path, Run  # noqa: F401  (re-exported)
from .blocks import QueryBlocks
from .distance import DistanceForm, DistanceTerms  # noqa: F401  (re-exported)
from .distance import triton_path
from .distance.bias_path import DistanceBias
from .distance.flex_forms import FlexPiece
from .distance.triton_path import TritonDistance
from .explicit import Explicit
from .flex import FlexBand
from .local import BlockLocal
from .policy import DEFAULT, Policy  # noqa: F401  (re-exported)
from .regions import RegionSplit
from .sdpa import Fused
from .tuning import Tuned

BACKENDS = ("auto", "fused", "explicit", "flex", "triton", "tuned")
#: the path each forced backend names (refused at build when it cannot run the model)
NAMED = {"fused": Fused(), "flex": FlexPiece(), "triton": triton_path.FORCED}


@lru_cache(maxsize=None)
def order(backend: str, policy: Policy = DEFAULT) -> Tuple[Path, ...]:
    """The paths ``--attn-backend backend`` tries, in order, with ``policy``'s thresholds."""
    if backend == "explicit":
        return (Explicit(),)
    p = policy
    sdpa = (BlockLocal(min_len=p.local_min_len, block=p.local_block), Fused(), Explicit())
    if backend == "fused":
        return sdpa
    if backend == "flex":
        return (FlexPiece(), FlexBand()) + sdpa
    if backend == "triton":
        return (triton_path.FORCED,) + sdpa
    if backend == "tuned":
        return (Tuned(),)
    # the flex paths for inference only: their compiled backward failed on an H200 (torch
    # 2.11: a stride assertion at a new batch shape, in a fresh process without inductor's
    # caches too) and trained slower than the SDPA paths (benchmarks/RESULTS.md, "GPU
    # checks"); --attn-backend flex still trains through them.
    # The distance kernels on the policy's distance_devices, and on CUDA for the training calls
    # of the forms measured faster there than the paths auto takes otherwise (the policy's
    # cuda_training_forms: relpos kv/tied through the region split, t5bias through the distance
    # bias); the query blocks (the decoder) are unmeasured on CUDA and stay off it
    cuda = dict(cuda_training_forms=p.cuda_training_forms, cuda_training_min_len=p.cuda_training_min_len)
    return (TritonDistance(forms=p.triton_forms, min_len=p.triton_min_len),
            FlexPiece(devices=CUDA, trains=False),
            FlexBand(devices=CUDA, min_len=p.flex_band_min_len, trains=False),
            RegionSplit(devices=p.distance_devices, min_len=p.blocked_min_len, **cuda),
            QueryBlocks(devices=p.distance_devices, min_len=p.blocked_min_len),
            DistanceBias(devices=p.distance_devices, min_len=p.distance_bias_min_len, **cuda)) + sdpa


@lru_cache(maxsize=4096)  # the choice is a function of these; a call's lengths repeat over layers and steps
def choose(layer: Layer, call: Call) -> Path:
    """The first path of the layer's order (its backend, its policy) without reasons
    (explicit always can)."""
    return next(p for p in order(layer.backend, layer.policy) if not p.not_supported_reasons(layer, call))


#: ``auto``'s order, every path once
PATHS = order("auto")


def reasons(layer: Layer, call: Call) -> Dict[str, List[str]]:
    """path name -> why it does not run this call (empty: it could), over the layer's order."""
    return {p.name: p.not_supported_reasons(layer, call) for p in order(layer.backend, layer.policy)}


def distance_form(pieces: Sequence) -> Optional[DistanceForm]:
    """The form of the distance terms of a layer's only piece (``None``: several pieces, or
    a piece that declares none)."""
    terms = pieces[0].distance_terms() if len(pieces) == 1 else None
    return None if terms is None else terms.form


def why_explicit(layer: Layer) -> Optional[str]:
    """Why a training call of this layer runs the explicit path (``None`` if it does not)."""
    if layer.backend != "tuned" and not any(isinstance(p, Fused) for p in order(layer.backend, layer.policy)):
        return f"--attn-backend {layer.backend}"
    why = Fused().not_supported_reasons(layer, Call())
    return "; ".join(why) if why else None


def backend_refusals(backend: str, needs_probs: Sequence[str], dropout: float,
                     terms_pieces: Optional[Sequence[str]] = None) -> List[str]:
    """Why ``--attn-backend backend`` (one of :data:`BACKENDS`) cannot run a model at all:
    the reasons of the path it names (empty: it can). ``terms_pieces``: the model's pieces
    that declare distance terms (``None``: not known here)."""
    if backend == "triton":
        reasons = triton_path.device_refusals(dropout)
        if terms_pieces is not None and not terms_pieces:
            reasons.append("no piece of the model declares distance terms (t5bias, alibi, relpos)")
        return reasons
    named = NAMED.get(backend)
    return named.model_reasons(needs_probs, dropout) if named else []


def refuse(backend: str, refusals: Sequence[str]) -> None:
    """One line naming the flag and each reason."""
    if refusals:
        raise PieceConfigError(f"--attn-backend {backend}: {'; '.join(refusals)}; "
                               f"--attn-backend auto or explicit runs every layer, on the explicit path where needed")


def check_backend(backend: str, needs_probs: Sequence[str], dropout: float,
                  terms_pieces: Optional[Sequence[str]] = None) -> None:
    """Refuse a backend that cannot run the model: one line naming the flag and each reason."""
    if backend not in BACKENDS:
        raise PieceConfigError(f"--attn-backend must be one of {list(BACKENDS)} (got {backend!r})")
    refuse(backend, backend_refusals(backend, needs_probs, dropout, terms_pieces))


def check_layer(layer: Layer, head_dim: int, dropout: float) -> None:
    """Refuse, at build, a backend that cannot run this layer (one line): ``triton`` where the
    kernels do not run its pieces' terms or its head size (:func:`check_backend` first)."""
    check_backend(layer.backend, layer.needs_probs, dropout)
    if layer.backend == "triton":
        refuse("triton", triton_path.layer_refusals(layer.distance, layer.pieces, head_dim))


def check_training_device(backend: str, cpu: bool) -> None:
    """Refuse training ``--attn-backend backend`` on CPU where its path has no CPU training
    (flex: no backward there; triton: CUDA kernels), before anything is trained or written."""
    flex.check_training_device(backend, cpu)
    why = triton_path.training_refusal(cpu) if backend == "triton" else None
    if why:
        raise PieceConfigError(why)


def check_flex_compile(mode: str) -> None:
    """Refuse an unknown ``--attn-flex-compile`` in one line."""
    if mode not in flex.COMPILE_MODES:
        raise PieceConfigError(f"--attn-flex-compile must be one of {list(flex.COMPILE_MODES)} "
                               f"(got {mode!r})")
