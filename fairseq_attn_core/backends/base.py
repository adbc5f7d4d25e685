"""What every attention path shares: what it is told, what it declares, how it is refused.

A path declares what it supports as data (class attributes, as xformers'
``AttentionOpBase``; the thresholds an order sets per instance), read by the one
:meth:`Path.not_supported_reasons`, and computes a layer's attention in :meth:`Path.apply`:
``(out (B, H, T, D) per head, probabilities (B, H, T, S) or None)``. Two kinds:

* :class:`PiecePath`: the kernels of :mod:`.distance` compute the whole attention from the
  distance terms of the layer's only piece (``AttentionPiece.distance_terms``; the path
  names, in ``takes``, the property of their form it runs: :class:`.distance.DistanceForm`);
* :class:`HookPath`: the core's hooks (``transform_qkv``, :class:`~..scores.Scores`, the
  widening piece), then the path's own :meth:`HookPath.attend`.
"""

from dataclasses import dataclass
from typing import ClassVar, Dict, List, Optional, Sequence, Tuple

from torch import Tensor

from ..scores import Scores
from .distance import DistanceForm
from .policy import DEFAULT, Policy

CPU, CUDA = ("cpu",), ("cuda",)


@dataclass(frozen=True)
class Layer:
    """What the chooser knows of a layer, fixed at build."""

    backend: str
    #: the names of the layer's pieces, in --attn-pieces order
    pieces: Tuple[str, ...] = ()
    #: pieces that need the probability matrix (no fused path)
    needs_probs: Tuple[str, ...] = ()
    #: the form of the distance terms of the layer's only piece (``None``: no such piece)
    distance: Optional[DistanceForm] = None
    #: keys only within this many positions of the query (the narrowest declared band)
    band_half: Optional[int] = None
    #: the thresholds and block sizes the chooser and the kernels read
    policy: Policy = DEFAULT


@dataclass(frozen=True)
class Call:
    """What the chooser knows of one forward call."""

    need_weights: bool = False
    incremental: bool = False
    tgt_len: int = 1
    src_len: int = 1
    dropout_p: float = 0.0
    on_cuda: bool = False
    #: fairseq's ``attn_mask`` is given (decoder self-attention: the future mask)
    attn_mask: bool = False
    #: a training call: the module trains and gradients are recorded (a backward follows)
    backward: bool = False


@dataclass
class Run:
    """What a path is given besides q, k, v (B, H, T|S, D) and the pieces' context."""

    pieces: Sequence  # the layer's pieces, in --attn-pieces order
    attn_mask: Optional[Tensor]  # fairseq's (T, S) mask
    scale: float
    dropout_p: float
    flex_compile: str  # --attn-flex-compile
    band_half: Optional[int] = None
    policy: Policy = DEFAULT
    #: the query blocks the path's kernel ran (set by the blocked paths; ``None``: one call)
    query_blocks: Optional[int] = None
    #: the layer and the call the chooser was asked about (read by ``--attn-backend tuned``)
    layer: Optional[Layer] = None
    call: Optional[Call] = None
    #: the layer's choices per shape class (``--attn-backend tuned``: :mod:`.tuning`)
    tuned: Optional[Dict[str, Tuple[str, str]]] = None
    #: the path that ran, where the chosen one delegates (``tuned``)
    ran: Optional[str] = None


@dataclass(frozen=True)
class Path:
    """One way to compute a layer's attention. Instance fields: what an order prefers."""

    name: ClassVar[str] = ""
    #: why torch cannot run it here (``None``: it can)
    unavailable: ClassVar[Optional[str]] = None
    #: why it has no attention dropout (``None``: it has)
    no_dropout: ClassVar[Optional[str]] = None
    #: it returns the probability matrix (attention weights)
    gives_weights: ClassVar[bool] = False
    #: every piece of the layer must run without the probability matrix
    fused_pieces_only: ClassVar[bool] = False
    #: the property of the layer's distance form that it runs (``"flex"``, ``"far_split"``, ...)
    takes: ClassVar[Optional[str]] = None
    #: needs a declared band (``band_half``)
    needs_band: ClassVar[bool] = False
    #: needs the queries to be the keys: no incremental decoding, as many queries as keys
    queries_are_keys: ClassVar[bool] = False
    #: why it runs no call with fairseq's ``attn_mask`` (``None``: it runs them)
    no_attn_mask: ClassVar[Optional[str]] = None

    #: the devices an order takes it on
    devices: Tuple[str, ...] = CPU + CUDA
    #: the shortest query length an order takes it for
    min_len: int = 1
    #: the band must fit in a block of this many positions (``2 * band_half < block``)
    block: Optional[int] = None
    #: an order takes it for training calls too (``False``: inference only)
    trains: bool = True
    #: on CUDA, where ``devices`` does not list it: an order takes it for the training calls of
    #: a layer whose distance form has one of these properties (``Policy.cuda_training_forms``)
    cuda_training_forms: Tuple[str, ...] = ()
    #: from this many query positions
    cuda_training_min_len: int = 1

    def model_reasons(self, needs_probs: Sequence[str], dropout_p: float) -> List[str]:
        """Why it cannot run any layer of a model (build time: torch, dropout, the pieces)."""
        reasons = [self.unavailable] if self.unavailable else []
        if dropout_p > 0 and self.no_dropout:
            reasons.append(f"attention dropout {dropout_p} ({self.no_dropout}; "
                           f"needs --attention-dropout 0)")
        if needs_probs and self.fused_pieces_only:
            reasons.append(f"pieces {list(needs_probs)} need the probability matrix")
        return reasons

    def not_supported_reasons(self, layer: Layer, call: Call) -> List[str]:
        """Why it cannot run ``call`` of ``layer`` (empty: it can)."""
        reasons = self.model_reasons(layer.needs_probs, call.dropout_p)
        device = "cuda" if call.on_cuda else "cpu"
        if device == "cuda" and device not in self.devices and self.cuda_training_forms:
            reasons += self.cuda_training_reasons(layer, call)
        elif device not in self.devices:
            reasons.append(f"on {device} (taken on {'/'.join(self.devices)} only)")
        if call.need_weights and not self.gives_weights:
            reasons.append("attention weights requested")
        if self.takes and not (layer.distance is not None and getattr(layer.distance, self.takes)):
            reasons.append(f"the layer's only piece declares no distance terms it runs ({self.takes})")
        if self.needs_band and layer.band_half is None:
            reasons.append("no piece declares a band (band_half)")
        if self.queries_are_keys:
            if call.incremental:
                reasons.append("incremental decoding")
            if call.tgt_len != call.src_len:
                reasons.append("queries and keys differ")
        if call.attn_mask and self.no_attn_mask:
            reasons.append(f"fairseq's attn_mask given ({self.no_attn_mask})")
        if call.backward and not self.trains:
            reasons.append("a training call (this order takes it for inference only)")
        if call.tgt_len < self.min_len:
            reasons.append(f"shorter than {self.min_len} positions")
        if self.block is not None and layer.band_half is not None and 2 * layer.band_half >= self.block:
            reasons.append(f"band wider than the {self.block}-position block")
        return reasons

    def cuda_training_reasons(self, layer: Layer, call: Call) -> List[str]:
        """Why a CUDA call is not one of the training calls an order takes it for there."""
        forms = "/".join(self.cuda_training_forms)
        reasons = []
        if not call.backward:
            reasons.append("on cuda, an inference call (taken there for training calls only)")
        if not (layer.distance is not None and any(getattr(layer.distance, f) for f in self.cuda_training_forms)):
            reasons.append(f"on cuda, distance terms without {forms} (taken there for those only)")
        if call.tgt_len < self.cuda_training_min_len:
            reasons.append(f"on cuda, shorter than {self.cuda_training_min_len} positions")
        return reasons

    def apply(self, q: Tensor, k: Tensor, v: Tensor, ctx, run: Run) -> Tuple[Tensor, Optional[Tensor]]:
        raise NotImplementedError


class PiecePath(Path):
    """The layer's only piece computes the whole attention."""

    def apply(self, q, k, v, ctx, run):
        return self.piece_attention(run.pieces[0], q, k, v, ctx, run), None

    def piece_attention(self, piece, q, k, v, ctx, run: Run) -> Tensor:
        raise NotImplementedError


class HookPath(Path):
    """The pieces' hooks around the path's own softmax (:meth:`attend`)."""

    def apply(self, q, k, v, ctx, run):
        for p in run.pieces:
            q, k, v = p.transform_qkv(q, k, v, ctx)
        scores = Scores.of(run.pieces, q, k, ctx, run.attn_mask)
        for p in run.pieces:  # at most one piece widens the key axis (2D-CSAN)
            k, v = p.widen(k, v, scores, ctx)
        scores.mark_empty_rows()
        out, probs = self.attend(q, k, v, scores, ctx, run)
        # a path that ran the probability hooks zeroed the emptied rows itself, before combine
        return (out if probs is not None else scores.zero_empty(out)), probs

    def attend(self, q, k, v, scores: Scores, ctx, run: Run) -> Tuple[Tensor, Optional[Tensor]]:
        """(out (B, H, T, D), the probabilities or ``None``) from the hooked q, k, v."""
        raise NotImplementedError
