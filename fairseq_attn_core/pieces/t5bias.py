"""T5's bucketed relative position bias (``t5bias``), Raffel, Shazeer, Roberts,
Lee, Narang, Matena, Zhou, Li and Liu, JMLR 2020, "Exploring the Limits of
Transfer Learning with a Unified Text-to-Text Transformer" (arXiv:1910.10683),
section 2.1.

A learned scalar per head and per distance bucket is added to the scores::

    e_ij^h = q_i^h . k_j^h / sqrt(d) + b^h[bucket(j - i)]

``bucket`` is T5's ``_relative_position_bucket`` (mesh-tensorflow; the same in
Hugging Face's T5), computed as T5 does, in float32, with N buckets
(``--t5-buckets``, default 32) and ``--t5-max-distance`` M (default 128):

* bidirectional (encoder): half the buckets for keys to the right (j > i),
  half for the rest, n = N/2 each, and r = |j - i|;
* causal (decoder): all N buckets for the past, r = max(i - j, 0);
* with e = n/2: distances r < e get their own bucket (exact); larger ones share
  log-spaced buckets ``e + floor(log(r/e) / log(M/e) * (n - e))``, capped at
  n - 1 (every distance beyond about M lands in the last bucket).

Sharing (``--t5-sharing``): ``stack`` (default, T5): one table (N, H) per stack,
shared by the layers of the encoder (of the decoder) that hold the piece; T5
computes it in the first layer and reuses it in the others. The table is a
parameter of the first such layer (it appears once in the state dict), the
other layers read it from there (refused with ``--ddp-backend fully_sharded``,
which shards each layer on its own). ``layer``: one table per layer.
Parameters at base size: 32 x 8 = 256 per stack, 512 in all (``layer``:
256 per layer, 3,072 in all). Initialisation: normal with std d_model^-1/2, as Hugging Face's T5
(``factor`` 1). The paper does not say; Mesh TensorFlow's T5 creates the table without an
initializer, so TensorFlow's glorot_uniform applies (std sqrt(2 / (H + N)): 0.21 for T5-base's
12 heads and 32 buckets, 0.24 at 4 heads, against d_model^-1/2 = 0.088 at d_model 128). Kept
as a decision: the buckets training reaches leave their initial values far behind (root mean
square 0.088 -> 0.31 encoder / 0.58 decoder on the bible study, docs/results/lengths_study.md), and a bucket
it never reaches keeps its initial value, which the smaller std keeps nearer to no bias.
T5 does not scale q.k by 1/sqrt(d) (it folds the scale into the initialisation of W_q);
here the bias is added to the scaled score as every piece does, q.k / sqrt(d) + b. W_q absorbs the difference (T5's W_q = ours / sqrt(d)
gives the same logits); the table is unchanged, added unscaled in both.

Placement: ``--t5-sides`` (default encoder,decoder), ``--t5-layers`` (default
all): every self-attention layer as in T5. Encoder-decoder attention is
fairseq's own (T5 gives it no position bias either). ``--t5-abs-pos drop``
(default) turns fairseq's sinusoidal token position embeddings off (T5 has
none); see :mod:`..position_method_flags`.

i and j are key indices of the padded batch; only j - i enters, so left or
right padding gives the same output; incremental decoding reads the distances
from ``q_pos``/``k_pos``, exact. With 2D-CSAN's widened keys each slot carries
the bias of its key's distance for the query's head.

Backends: the piece declares its table by bucket as data (:meth:`T5RelativeBias.distance_terms`).
An additive float bias (1, H, T, S) on the fused SDPA path and the explicit one; on CPU,
``auto`` runs an encoder self-attention (no attention dropout) from the policy's
``distance_bias_min_len`` (128) positions on the distance-bias path
(:mod:`..backends.distance.bias_path`: the bias per distance as torch's CPU flash kernel's mask, a
blocked backward gives the table its gradient), which keeps no (B, H, T, S) tensor; SDPA with
a bias that needs a gradient leaves the flash kernel. On CUDA ``auto`` takes the same path for
training calls from the policy's ``cuda_training_min_len`` (512) positions (torch's
memory-efficient kernel; measured on an H200, benchmarks/RESULTS.md).
``--attn-backend triton`` runs the bias by bucket, its table's gradient included, through the Triton flash kernels
(:mod:`..backends.distance.triton_path`; CUDA, attention dropout 0, the piece alone in its layer),
encoder and decoder self-attention (fairseq's future mask read as the causal flag); ``--attn-backend
tuned`` times it beside the other paths and keeps the fastest per shape class.
"""

import math
import weakref
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from ..backends.distance import DistanceTerms
from ..piece import AttentionPiece, AttentionSite, Choice, Int, PieceConfigError, parse_layer_spec, register_piece
from ..position_method_flags import placement_settings, position_conflicts, replace_token_positions

SHARING = ("stack", "layer")


def relative_position_bucket(relative_position: Tensor, bidirectional: bool, num_buckets: int,
                             max_distance: int) -> Tensor:
    """T5's bucket of ``relative_position = key position - query position`` (long tensor)."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        relative_position = relative_position.abs()
    else:
        relative_position = -torch.clamp(relative_position, max=0)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    # float32 as T5 (log of 0 only where is_small, not selected)
    large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).long()
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(is_small, relative_position, large)


#: (id of the build configuration, side) -> the piece holding that stack's shared table
_STACK_TABLES: Dict[Tuple[int, str], "weakref.ReferenceType"] = {}


@register_piece
class T5RelativeBias(AttentionPiece):
    """T5 (Raffel et al. 2020): learned per-head bias over log-spaced distance buckets."""

    name = "t5bias"
    conflicts = position_conflicts("t5bias")
    test_flags = {"t5_layers": "0", "t5_buckets": 8, "t5_max_distance": 6}

    settings = (
        Int("t5_buckets", 32, lo=4, rule="even",
            help="T5 relative bias: number of distance buckets, an even integer >= 4 (default 32)"),
        Int("t5_max_distance", 128, lo=3, metavar="M", rule="> --t5-buckets / 2",
            help="T5 relative bias: distance from which every key shares the last bucket, "
                 "integer > buckets/2 (default 128)"),
        Choice("t5_sharing", "stack", SHARING,
               help="T5 relative bias: 'stack' one table per encoder/decoder shared by its "
                    "layers (T5, default stack) or 'layer' one table per layer"),
    ) + placement_settings("t5", "T5 relative bias")

    @classmethod
    def check_combination(cls, args):
        n = args.t5_buckets
        if n % 2:
            raise PieceConfigError(f"--t5-buckets must be an even integer >= 4 (got {n}): "
                                   f"the encoder splits the buckets between the two directions")
        if args.t5_max_distance <= n // 2:
            # the causal side has exact buckets below n/2, log-spaced ones up to the distance
            raise PieceConfigError(f"--t5-max-distance must be an integer > --t5-buckets / 2 = "
                                   f"{n // 2} (got {args.t5_max_distance})")
        if args.t5_sharing == "stack" and getattr(args, "ddp_backend", None) == "fully_sharded":
            raise PieceConfigError("--t5-sharing stack shares one table between layers, which "
                                   "--ddp-backend fully_sharded wraps (shards) separately; use "
                                   "--t5-sharing layer or another --ddp-backend")
        replace_token_positions(cls, args, "t5", "T5 relative bias")

    @classmethod
    def from_args(cls, site: AttentionSite, args):
        owner = None
        if args.t5_sharing == "stack":
            spec = parse_layer_spec(args.t5_layers, site.num_layers, "--t5-layers")
            first = spec[0]
            key = (id(args), site.side)
            if site.layer_idx != first:  # fairseq builds a stack's layers in order
                ref = _STACK_TABLES.get(key)
                owner = ref() if ref is not None else None
                if owner is None or owner.site.num_heads != site.num_heads:
                    raise RuntimeError(f"t5bias: {site.side} layer {site.layer_idx} built before "
                                       f"layer {first}, which holds the shared table")
        piece = cls(site, args.t5_buckets, args.t5_max_distance, owner)
        if args.t5_sharing == "stack" and owner is None:
            _STACK_TABLES[(id(args), site.side)] = weakref.ref(piece)
        return piece

    def __init__(self, site: AttentionSite, num_buckets: int = 32, max_distance: int = 128,
                 owner: Optional["T5RelativeBias"] = None):
        super().__init__(site)
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = site.side == "encoder"
        if owner is None:
            self.bucket_bias = nn.Parameter(torch.empty(num_buckets, site.num_heads))
            nn.init.normal_(self.bucket_bias, std=(site.num_heads * site.head_dim) ** -0.5)
            self._owner = None
        else:
            self.bucket_bias = None
            # a plain reference, not a submodule: the table is saved once, with its owner
            object.__setattr__(self, "_owner", owner)

    def table(self) -> Tensor:
        """(N, H) the bias of each bucket and head (the stack's shared one, or this layer's)."""
        return self.bucket_bias if self._owner is None else self._owner.bucket_bias

    def bucket(self, rel: Tensor) -> Tensor:
        """T5's bucket of each key - query distance ``rel`` (long tensor)."""
        return relative_position_bucket(rel, self.bidirectional, self.num_buckets, self.max_distance)

    def distance_terms(self) -> DistanceTerms:
        """The bias table (N, H) read by bucket."""
        return DistanceTerms(bias_table=self.table(), bucket=self.bucket)

    def score_bias(self, q: Tensor, k: Tensor, ctx) -> Tensor:
        """``b^h[bucket(j - i)]`` as (1, H, T, S)."""
        return self.distance_terms().score_bias(q, ctx.q_pos, ctx.k_pos, 1.0)

    def extra_repr(self):
        shared = "own table" if self._owner is None else f"table of layer {self._owner.site.layer_idx}"
        return (f"buckets={self.num_buckets}, max_distance={self.max_distance}, "
                f"{'bidirectional' if self.bidirectional else 'causal'}, {shared}, "
                f"{self.site.side} layer {self.site.layer_idx}")
