"""The contract between the attention core and the variants ("pieces").

A piece is a small ``nn.Module`` that fills only the hooks it needs. The core
(:mod:`fairseq_attn_core.core`) and the path that runs the call
(:mod:`.backends`) call the hooks in this order::

    q, k, v   = transform_qkv(q, k, v, ctx)              # (B, H, T|S, D)
    bias     += score_bias(q, k, ctx)                    # -> (B|1, H|1, T, S) float
    allowed  &= allowed_mask(ctx)                        # -> (B|1, H|1, T, S) bool, True = may attend
    k, v      = widen(k, v, scores, ctx)                 # widen the key axis, scores to match (2D-CSAN)
    probs     = softmax(scale * q k^T + bias, ~allowed)  # fused or explicit
    probs     = post_softmax(probs, ctx)                 # explicit path only
    out       = probs @ v + value_term(probs, ctx)       # explicit path only
    out       = combine(probs, v, out, ctx)              # explicit path only
    y         = out_proj(out) + output_term(out, ctx)    # both paths, (T, B, C)
    weights   = fold_weights(probs, ctx)                 # weights requested (explicit path)

and, at model level, ``x = layer_input(x, key_padding_mask)`` on the input of
every encoder layer that holds the piece (before its self-attention sublayer).

What a piece can do is declared on :class:`AttentionPiece`, each capability with its
default, and the core reads nothing else: ``fused_ok`` / ``fused_with`` (a piece that
overrides ``post_softmax``, ``value_term`` or ``combine`` declares ``fused_ok = False``;
the layer then runs the explicit path), ``incremental_ok`` (refused once, by the core),
``expands_kv`` (``widen`` / ``fold_weights``, at most one per model), ``band_half`` (the
block-local and flex band paths) and ``distance_terms`` (a position piece's relative structure
as data: tables, clip, bucket table, slopes; alone in its layer, the kernels of
:mod:`.backends.distance` compute the whole attention from it). The paths and the chooser
between them: :mod:`.backends`.

Every piece class is registered with :func:`register_piece` and declares its
settings once, as data (``settings``: :mod:`.settings`); the base class derives
from them the flags (``add_args``), the defaults (``set_defaults``), the
validation (``validate``), which layers hold the piece (``covers``) and the
factory (``build``, ``None`` where the piece is inactive). A piece adds only
what its math needs: ``check_combination`` for rules that tie several flags
together, ``from_args`` when its constructor takes something else than
``(site, args)``, ``architectures`` for named presets of its flags.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Dict, Optional, Tuple, Type

from torch import Tensor, nn

from .settings import (  # noqa: F401  (re-exported: a piece file imports from here)
    LAYERS,
    SIDES,
    SIDES_ROLE,
    Choice,
    Float,
    Int,
    Layers,
    PieceConfigError,
    Setting,
    Sides,
    Text,
    parse_layer_spec,
    parse_sides,
    require_choice,
    require_float,
    require_int,
    require_positive,
)

if TYPE_CHECKING:  # the declaration's type; the kernels that read it live with the paths
    from .backends.distance import DistanceTerms


@dataclass(frozen=True)
class AttentionSite:
    """Where an attention module sits in the model. Checked when made (a ``ValueError`` of one
    line): a side or layer that no piece could cover would otherwise build no piece, silently."""

    side: str  # "encoder" or "decoder" (self-attention only)
    layer_idx: int  # 0-based, counted from the embeddings
    num_layers: int
    num_heads: int
    head_dim: int

    def __post_init__(self):
        if self.side not in SIDES:
            raise ValueError(f"AttentionSite: side must be one of {list(SIDES)} (got {self.side!r})")
        for name in ("num_layers", "num_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"AttentionSite: {name} must be an integer >= 1 (got {value!r})")
        i = self.layer_idx
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < self.num_layers:
            raise ValueError(f"AttentionSite: layer_idx must be an integer in [0, {self.num_layers - 1}] "
                             f"(0-based from the embeddings, num_layers={self.num_layers}) (got {i!r})")


@dataclass
class AttentionContext:
    """Per-call information handed to every hook."""

    site: AttentionSite
    bsz: int
    tgt_len: int
    src_len: int
    q_pos: Tensor  # (T,) index of each query in the key sequence
    k_pos: Tensor  # (S,)
    key_padding_mask: Optional[Tensor]  # (B, S) bool, True = pad
    training: bool
    incremental: bool
    #: how many times the key axis was widened by ``widen`` (2D-CSAN: N+1);
    #: probabilities seen by post_softmax/value_term/combine are (B, H, T, kv_factor * S),
    #: slot ``s * S + j`` being key position j of the s-th head of the area.
    kv_factor: int = 1
    #: the layer's incremental-decoding buffer (``None`` outside incremental decoding):
    #: a piece may keep its own batch-first tensors there under keys prefixed with its
    #: name; fairseq reorders them with the beam like ``prev_key``.
    cache: Optional[Dict[str, Optional[Tensor]]] = None


class AttentionPiece(nn.Module):
    """Base class of all variants. Hooks default to the identity."""

    name: ClassVar[str] = ""
    #: False if the piece always needs the materialised probability matrix.
    fused_ok: ClassVar[bool] = True
    #: the settings that decide whether it does: setting name -> the values that keep the
    #: fused path (relpos: ``{"relpos_mode": ("k",)}``). Read by :meth:`fused_ok_with`.
    fused_with: ClassVar[Dict[str, Tuple[Any, ...]]] = {}
    #: other piece name -> why the two cannot run together.
    conflicts: ClassVar[Dict[str, str]] = {}
    #: True if the piece implements ``widen`` and ``fold_weights`` (at most one per model:
    #: :func:`check_one_widener`).
    expands_kv: ClassVar[bool] = False
    #: True if the piece supports incremental (cached key/value) decoding; the core refuses
    #: an incremental call to a layer holding a piece that does not.
    incremental_ok: ClassVar[bool] = True
    #: keys only within ``band_half`` positions of the query (``allowed_mask`` is such a band,
    #: 1D-/2D-CSAN): long sequences may take the block-local or flex band path. ``None``: no band.
    band_half: Optional[int] = None
    #: whether this instance runs without the probability matrix: set by :meth:`build` from
    #: :meth:`fused_ok_with` (a piece constructed otherwise: ``fused_ok`` and no ``fused_with``)
    runs_fused: bool
    #: flags that make the piece active on layer 0 of a tiny 2-layer, 4-head model
    #: (used by the shared tests that loop over the registry).
    test_flags: ClassVar[Dict[str, object]] = {}

    # ---- settings, as data ---------------------------------------------
    #: the piece's flags: exactly one ``Layers(...)``, and ``Sides(...)`` unless ``sides`` is fixed
    settings: ClassVar[Tuple[Setting, ...]] = ()
    #: the self-attentions of a piece without a ``Sides`` setting (``("encoder",)``)
    sides: ClassVar[Optional[Tuple[str, ...]]] = None
    #: flags of a sibling piece that this one accepts and does not use (csan1d takes
    #: ``--csan-heads`` of csan2d), so that commands and checkpoints setting them still build
    unused_settings: ClassVar[Tuple[Setting, ...]] = ()
    #: named presets: ``transformer_<key>_wmt_en_de`` (and ``..._vaswani_wmt_en_de_big``)
    #: run this piece with these flag defaults (explicit flags still win); the plain
    #: ``transformer_<name>_*`` architectures are registered for every piece
    architectures: ClassVar[Dict[str, Dict[str, Any]]] = {}

    def __init__(self, site: AttentionSite):
        super().__init__()
        self.site = site
        self.runs_fused = self.fused_ok and not self.fused_with

    @classmethod
    def all_settings(cls) -> Tuple[Setting, ...]:
        return tuple(cls.settings) + tuple(cls.unused_settings)

    @classmethod
    def add_args(cls, parser) -> None:
        """The piece's flags, without ``default=`` (the architectures set defaults)."""
        for s in cls.all_settings():
            s.add_to(parser)

    @classmethod
    def set_defaults(cls, args) -> None:
        """Fill every flag of the piece missing from ``args`` with its default."""
        for s in cls.all_settings():
            s.fill_default(args)

    @classmethod
    def validate(cls, args) -> None:
        """Check every setting, then ``check_combination``; raise :class:`PieceConfigError`
        naming the flag and the allowed values."""
        for s in cls.settings:
            if s.role == SIDES_ROLE:
                cls.covered_sides(args)
            elif s.role == LAYERS:
                cls.layers_per_side(args)
            else:
                s.check(args)
        cls.check_combination(args)

    @classmethod
    def check_combination(cls, args) -> None:
        """Rules that tie several flags, or a flag and the model, together (after the
        single-flag checks). Raise :class:`PieceConfigError` naming the flags."""

    @classmethod
    def layers_setting(cls) -> Setting:
        return next(s for s in cls.settings if s.role == LAYERS)

    @classmethod
    def covered_sides(cls, args) -> Tuple[str, ...]:
        """The self-attentions (``encoder``/``decoder``) the piece applies to."""
        if cls.sides is not None:
            return tuple(cls.sides)
        s = next(s for s in cls.settings if s.role == SIDES_ROLE)
        return parse_sides(getattr(args, s.name), s.flag)

    @classmethod
    def layers_per_side(cls, args) -> Dict[str, Tuple[int, ...]]:
        """side -> the layers holding the piece; refuses a layer list that leaves the
        piece active on no layer of the model (it was listed in ``--attn-pieces``)."""
        s = cls.layers_setting()
        spec = getattr(args, s.name)
        layers = {side: parse_layer_spec(spec, getattr(args, f"{side}_layers"), s.flag)
                  for side in cls.covered_sides(args)}
        if not any(layers.values()):
            raise PieceConfigError(
                f"{s.flag} {spec!r} leaves {cls.name} active on no layer of the model; expected "
                f"0-based layers such as '0', '0-2' or 'all', or leave {cls.name} out of "
                f"--attn-pieces (--attn-pieces none for no piece)"
            )
        return layers

    @classmethod
    def covers(cls, args, site: AttentionSite) -> bool:
        """Whether the piece is active at ``site`` (its sides and layer list)."""
        if site.side not in cls.covered_sides(args):
            return False
        s = cls.layers_setting()
        return site.layer_idx in parse_layer_spec(getattr(args, s.name), site.num_layers, s.flag)

    @classmethod
    def fused_ok_with(cls, args) -> bool:
        """Whether the piece, configured by ``args``, can run on the fused path (after
        ``validate``): the one rule, from ``fused_ok`` and ``fused_with``."""
        return cls.fused_ok and all(getattr(args, name) in values
                                    for name, values in cls.fused_with.items())

    @classmethod
    def build(cls, args, site: AttentionSite) -> Optional["AttentionPiece"]:
        """The piece for ``site``, or ``None`` if it is inactive there."""
        if not cls.covers(args, site):
            return None
        piece = cls.from_args(site, args)
        piece.runs_fused = cls.fused_ok_with(args)
        return piece

    @classmethod
    def from_args(cls, site: AttentionSite, args) -> "AttentionPiece":
        """Construct the piece for an active ``site``; ``cls(site, args)`` by default."""
        return cls(site, args)

    # ---- hooks -----------------------------------------------------------
    def transform_qkv(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext):
        return q, k, v

    def score_bias(self, q: Tensor, k: Tensor, ctx: AttentionContext) -> Optional[Tensor]:
        return None

    def allowed_mask(self, ctx: AttentionContext) -> Optional[Tensor]:
        return None

    def widen(self, k: Tensor, v: Tensor, scores, ctx: AttentionContext) -> Tuple[Tensor, Tensor]:
        """For a piece that declares ``expands_kv`` (2D-CSAN): k, v with the key axis
        ``ctx.kv_factor`` times wider, and ``scores`` (:class:`~.scores.Scores`) widened to
        match; the identity otherwise."""
        return k, v

    def fold_weights(self, weights: Tensor, ctx: AttentionContext) -> Tensor:
        """The attention weights (B, H, T, kv_factor * S) folded back onto the S key
        positions, for a piece that declares ``expands_kv``; the identity otherwise."""
        return weights

    def post_softmax(self, probs: Tensor, ctx: AttentionContext) -> Tensor:
        return probs

    def value_term(self, probs: Tensor, ctx: AttentionContext) -> Optional[Tensor]:
        return None

    def combine(self, probs: Tensor, v: Tensor, out: Tensor, ctx: AttentionContext) -> Tensor:
        return out

    def distance_terms(self) -> Optional["DistanceTerms"]:
        """The piece's terms of the key-query distance as data (relpos: key and value tables
        and the clip; t5bias: a bias table by bucket; alibi: fixed slopes), or ``None``. Alone
        in its layer, a piece that declares them runs on the paths of :mod:`.backends` that
        take their form; its ``score_bias`` (and ``value_term``) equal them on every path."""
        return None

    def output_term(self, out: Tensor, ctx: AttentionContext) -> Optional[Tensor]:
        """A (T, B, C) term added after the output projection, computed from the heads'
        output ``out`` (B, H, T, D) that entered it; runs on the fused and explicit paths
        (Block self-attention: the inter-block context's share of a wider projection)."""
        return None

    def layer_input(self, x: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
        """Transform the input (T, B, C) of the encoder layer holding this piece, before
        its self-attention sublayer (Cnns: convolution sublayers). Encoder layers only:
        a decoder layer refuses a piece that overrides it."""
        return x

    def extra_repr(self) -> str:
        return f"{self.site.side} layer {self.site.layer_idx}"


PIECES: Dict[str, Type[AttentionPiece]] = {}


def register_piece(cls: Type[AttentionPiece]) -> Type[AttentionPiece]:
    """Add a piece class to the registry, after checking its settings declaration."""
    if not cls.name or cls.name in PIECES:
        raise ValueError(f"piece name {cls.name!r} is empty or registered twice")
    roles = [s.role for s in cls.settings]
    if roles.count(LAYERS) != 1:
        raise ValueError(f"piece {cls.name!r}: declare exactly one Layers(...) setting")
    if (SIDES_ROLE in roles) == (cls.sides is not None):
        raise ValueError(f"piece {cls.name!r}: declare either a Sides(...) setting or fixed `sides`")
    names = [s.name for s in cls.all_settings()]
    if len(set(names)) != len(names):
        raise ValueError(f"piece {cls.name!r}: a setting is declared twice in {names}")
    for other in PIECES.values():
        for mine in cls.all_settings():
            theirs = next((s for s in other.all_settings() if s.name == mine.name), None)
            if theirs is not None and theirs != mine:
                raise ValueError(f"piece {cls.name!r}: setting {mine.name!r} differs from the one "
                                 f"of {other.name!r}; share one declaration")
    PIECES[cls.name] = cls
    return cls


def check_one_widener(pieces) -> None:
    """At most one of ``pieces`` (classes or instances) widens the key axis."""
    wideners = [p.name for p in pieces if p.expands_kv]
    if len(wideners) > 1:
        raise PieceConfigError(
            f"--attn-pieces: {' and '.join(wideners)} conflict: each widens the key axis "
            f"with other heads' keys; at most one such piece per model"
        )


def positions_window(q_pos: Tensor, k_pos: Tensor, half: int) -> Tensor:
    """(T, S) bool: key within ``half`` positions of the query."""
    return (q_pos[:, None] - k_pos[None, :]).abs() <= half


__all__ = [
    "AttentionContext",
    "AttentionPiece",
    "AttentionSite",
    "Choice",
    "check_one_widener",
    "Float",
    "Int",
    "Layers",
    "PIECES",
    "PieceConfigError",
    "SIDES",
    "Setting",
    "Sides",
    "Text",
    "parse_layer_spec",
    "parse_sides",
    "positions_window",
    "register_piece",
    "require_choice",
    "require_float",
    "require_int",
    "require_positive",
]
