"""The contract between the attention core and the variants ("pieces").

A piece is a small ``nn.Module`` that fills only the hooks it needs. The core
(:mod:`fairseq_attn_plugins.attention.core`) calls the hooks in this order::

    q, k, v   = transform_qkv(q, k, v, ctx)              # (B, H, T|S, D)
    bias     += score_bias(q, k, ctx)                    # -> (B|1, H|1, T, S) float
    allowed  &= allowed_mask(ctx)                        # -> (B|1, H|1, T, S) bool, True = may attend
    k, v, slot_allowed = expand_kv(k, v, ctx)            # widen the key axis (2D-CSAN)
    probs     = softmax(scale * q k^T + bias, ~allowed)  # fused or explicit
    probs     = post_softmax(probs, ctx)                 # explicit path only
    out       = probs @ v + value_term(probs, ctx)       # explicit path only
    out       = combine(probs, v, out, ctx)              # explicit path only
    y         = out_proj(out) + output_term(out, ctx)    # both paths, (T, B, C)

and, at model level, ``x = layer_input(x, key_padding_mask)`` on the input of
every encoder layer that holds the piece (before its self-attention sublayer).

A piece that overrides ``post_softmax``, ``value_term`` or ``combine`` must set
``fused_ok = False``; the dispatcher then runs the explicit path for that layer.

Every piece class is registered with :func:`register_piece` and declares its
command-line flags (``add_args``), its defaults (``set_defaults``), its flag
validation (``validate``) and a factory (``build``) that returns ``None`` for
layers where the piece is inactive.
"""

from dataclasses import dataclass
from typing import ClassVar, Dict, Optional, Tuple, Type

from torch import Tensor, nn


@dataclass(frozen=True)
class AttentionSite:
    """Where an attention module sits in the model."""

    side: str  # "encoder" or "decoder" (self-attention only)
    layer_idx: int  # 0-based, counted from the embeddings
    num_layers: int
    num_heads: int
    head_dim: int


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
    #: how many times the key axis was widened by ``expand_kv`` (2D-CSAN: N+1);
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
    #: False if the piece needs the materialised probability matrix.
    fused_ok: ClassVar[bool] = True
    #: other piece name -> why the two cannot run together.
    conflicts: ClassVar[Dict[str, str]] = {}
    #: True if the piece implements ``expand_kv`` (at most one per layer).
    expands_kv: ClassVar[bool] = False
    #: True if the piece supports incremental (cached key/value) decoding.
    incremental_ok: ClassVar[bool] = True
    #: flags that make the piece active on layer 0 of a tiny 2-layer, 4-head model
    #: (used by the shared tests that loop over the registry).
    test_flags: ClassVar[Dict[str, object]] = {}

    def __init__(self, site: AttentionSite):
        super().__init__()
        self.site = site

    # ---- configuration -------------------------------------------------
    @classmethod
    def add_args(cls, parser) -> None:  # pragma: no cover - trivial default
        """Add the piece's flags. Never pass ``default=`` (see DEVELOPERS.md)."""

    @classmethod
    def set_defaults(cls, args) -> None:  # pragma: no cover - trivial default
        """Fill missing flags with ``getattr(args, name, default)``."""

    @classmethod
    def validate(cls, args) -> None:  # pragma: no cover - trivial default
        """Raise :class:`PieceConfigError` naming the flag when a value is invalid."""

    @classmethod
    def fused_ok_with(cls, args) -> bool:
        """Whether the piece, configured by ``args``, can run on the fused path (after
        ``validate``). Pieces whose options decide it override this and set ``fused_ok``
        per instance accordingly."""
        return cls.fused_ok

    @classmethod
    def build(cls, args, site: AttentionSite) -> Optional["AttentionPiece"]:
        """Return the piece for ``site``, or ``None`` if it is inactive there."""
        raise NotImplementedError

    # ---- hooks -----------------------------------------------------------
    def transform_qkv(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext):
        return q, k, v

    def score_bias(self, q: Tensor, k: Tensor, ctx: AttentionContext) -> Optional[Tensor]:
        return None

    def allowed_mask(self, ctx: AttentionContext) -> Optional[Tensor]:
        return None

    def expand_kv(
        self, k: Tensor, v: Tensor, ctx: AttentionContext
    ) -> Tuple[Tensor, Tensor, int, Optional[Tensor]]:
        """Return (k', v', factor, slot_allowed) with the key axis ``factor`` times wider."""
        return k, v, 1, None

    def post_softmax(self, probs: Tensor, ctx: AttentionContext) -> Tensor:
        return probs

    def value_term(self, probs: Tensor, ctx: AttentionContext) -> Optional[Tensor]:
        return None

    def combine(self, probs: Tensor, v: Tensor, out: Tensor, ctx: AttentionContext) -> Tensor:
        return out

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


class PieceConfigError(ValueError):
    """An invalid flag value or an incompatible set of pieces."""


PIECES: Dict[str, Type[AttentionPiece]] = {}


def register_piece(cls: Type[AttentionPiece]) -> Type[AttentionPiece]:
    if not cls.name or cls.name in PIECES:
        raise ValueError(f"piece name {cls.name!r} is empty or registered twice")
    PIECES[cls.name] = cls
    return cls


def parse_layer_spec(spec, num_layers: int, flag: str) -> Tuple[int, ...]:
    """Parse a layer list such as ``"0,1,2"``, ``"0-2"``, ``"all"`` or ``"none"``.

    Layers are 0-based from the embeddings, so "the lower 3 layers" is ``0-2``.
    """
    text = str(spec).strip().lower()
    if text in ("all", "*"):
        return tuple(range(num_layers))
    if text in ("none", ""):
        return ()
    layers = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi:
                    raise ValueError
                layers.update(range(lo, hi + 1))
            else:
                layers.add(int(part))
    except ValueError:
        raise PieceConfigError(
            f"{flag}: cannot parse {spec!r}; expected 0-based layer indices such as "
            f"'0,1,2', a range '0-2', 'all' or 'none'"
        ) from None
    bad = sorted(i for i in layers if i < 0 or i >= num_layers)
    if bad:
        raise PieceConfigError(
            f"{flag}: layer index {bad} out of range; this model has {num_layers} "
            f"layers, allowed indices are 0..{num_layers - 1}"
        )
    return tuple(sorted(layers))


SIDES = ("encoder", "decoder")


def parse_sides(spec, flag: str) -> Tuple[str, ...]:
    """Which self-attentions a piece applies to: ``"encoder"``, ``"decoder"``,
    ``"encoder,decoder"`` (or its alias ``"both"``); raises naming ``flag``."""
    text = str(spec).strip().lower()
    parts = SIDES if text == "both" else tuple(s.strip() for s in text.split(",") if s.strip())
    if not parts or any(s not in SIDES for s in parts):
        raise PieceConfigError(
            f"{flag} must be 'encoder', 'decoder' or 'encoder,decoder' (alias 'both') (got {spec!r})"
        )
    return tuple(s for s in SIDES if s in parts)


def covers_site(args, prefix: str, site: AttentionSite, sides: Optional[str] = None) -> bool:
    """Whether a piece's ``--<prefix>-layers`` (and ``--<prefix>-sides``, or the fixed
    ``sides`` of an encoder-only piece) select ``site``; raises naming the flag."""
    side_spec = getattr(args, f"{prefix}_sides") if sides is None else sides
    if site.side not in parse_sides(side_spec, f"--{prefix}-sides"):
        return False
    layers = parse_layer_spec(getattr(args, f"{prefix}_layers"), site.num_layers, f"--{prefix}-layers")
    return site.layer_idx in layers


def require_int(args, attr: str, lo: int, hi: Optional[int] = None, odd: bool = False) -> int:
    """Validate an integer flag ``--attr-name`` and return it."""
    flag = "--" + attr.replace("_", "-")
    value = getattr(args, attr)
    allowed = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
    if odd:
        allowed = "odd and " + allowed
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < lo
        or (hi is not None and value > hi)
        or (odd and value % 2 == 0)
    ):
        raise PieceConfigError(f"{flag} must be an integer {allowed} (got {value!r})")
    return value


def require_choice(args, attr: str, choices) -> str:
    flag = "--" + attr.replace("_", "-")
    value = getattr(args, attr)
    if value not in choices:
        raise PieceConfigError(f"{flag} must be one of {list(choices)} (got {value!r})")
    return value


def require_float(args, attr: str, lo: float, hi: float, hi_open: bool = False) -> float:
    flag = "--" + attr.replace("_", "-")
    value = getattr(args, attr)
    ok = isinstance(value, (int, float)) and lo <= value and (value < hi if hi_open else value <= hi)
    if not ok:
        raise PieceConfigError(
            f"{flag} must be a number in [{lo}, {hi}{')' if hi_open else ']'} (got {value!r})"
        )
    return float(value)


def positions_window(q_pos: Tensor, k_pos: Tensor, half: int) -> Tensor:
    """(T, S) bool: key within ``half`` positions of the query."""
    return (q_pos[:, None] - k_pos[None, :]).abs() <= half


__all__ = [
    "AttentionContext",
    "AttentionPiece",
    "AttentionSite",
    "covers_site",
    "PIECES",
    "PieceConfigError",
    "parse_layer_spec",
    "parse_sides",
    "positions_window",
    "register_piece",
    "require_choice",
    "require_float",
    "require_int",
]
