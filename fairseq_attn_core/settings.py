"""A piece's settings, declared once as data.

Each command-line setting of a piece is one :class:`Setting`: its attribute name
(``csan_window``, flag ``--csan-window``), type, default, allowed range or choices,
help text, and its role (an ordinary value, the piece's layer list, or its sides).
From a piece's ``settings`` tuple the package derives everything else:

* the argparse flags (:meth:`Setting.add_to`; never with ``default=``: fairseq's
  architectures set defaults, so only the user's flags are present after parsing);
* the defaults that every architecture fills in (:meth:`Setting.fill_default`);
* the validation, raising :class:`PieceConfigError` naming the flag and the allowed
  values (:meth:`Setting.check`);
* which self-attentions the piece covers (:func:`covered_sides`, :func:`covers`);
* the fields of the model's fairseq dataclass config (``fairseq-hydra-train``).

Factories for the usual kinds: :func:`Int`, :func:`Float`, :func:`Choice`,
:func:`Text`, :func:`Layers`, :func:`Sides`.
"""

import math
from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

SIDES = ("encoder", "decoder")
#: fairseq's ``--max-source-positions`` and ``--max-target-positions`` when unset (its
#: DEFAULT_MAX_SOURCE_POSITIONS and DEFAULT_MAX_TARGET_POSITIONS; a test holds them equal)
FAIRSEQ_MAX_POSITIONS = 1024


class PieceConfigError(ValueError):
    """An invalid flag value or an incompatible set of pieces."""


VALUE, LAYERS, SIDES_ROLE = "value", "layers", "sides"


def flag_of(attr: str) -> str:
    """``csan_window`` -> ``--csan-window``."""
    return "--" + attr.replace("_", "-")


@dataclass(frozen=True)
class Setting:
    """One flag of a piece. ``hi`` may name a model attribute (``"encoder_attention_heads"``):
    the bound is then read from the model's configuration at validation."""

    name: str
    type: type
    default: Any
    help: str
    metavar: Optional[str] = None
    lo: Optional[Union[int, float]] = None
    hi: Optional[Union[int, float, str]] = None
    hi_open: bool = False
    odd: bool = False
    positive: bool = False
    choices: Optional[Tuple[str, ...]] = None
    role: str = VALUE
    rule: str = ""  # a rule tying the value to other flags (the piece's check_combination), in words

    @property
    def flag(self) -> str:
        return flag_of(self.name)

    # ---- derived behaviour ----------------------------------------------
    def add_to(self, parser) -> None:
        """Add the flag to ``parser`` (once: sibling pieces share some settings)."""
        if any(a.dest == self.name for a in parser._actions):
            return
        parser.add_argument(self.flag, type=self.type, metavar=self.metavar, help=self.help)

    def fill_default(self, args) -> None:
        setattr(args, self.name, getattr(args, self.name, self.default))

    def bound(self, args) -> Optional[Union[int, float]]:
        return getattr(args, self.hi) if isinstance(self.hi, str) else self.hi

    def check(self, args) -> Any:
        """Validate the value of a VALUE setting in ``args``; return it. Layer lists and
        sides are checked with the piece (:func:`covered_sides`, :func:`check_layers`)."""
        value = getattr(args, self.name)
        if self.choices is not None:
            return require_choice(args, self.name, self.choices)
        if self.type is int:
            return require_int(args, self.name, self.lo, self.bound(args), odd=self.odd)
        if self.type is float and self.positive:
            return require_positive(args, self.name, self.bound(args))
        if self.type is float:
            return require_float(args, self.name, self.lo, self.bound(args), hi_open=self.hi_open)
        return value


# ---- factories -----------------------------------------------------------
def Int(name: str, default, help: str, lo: int = 1, hi=None, odd: bool = False,
        metavar: str = "N", rule: str = "") -> Setting:
    """An integer in [lo, hi] (``hi`` None: no upper bound; a string: a model attribute);
    ``rule``: what the piece's ``check_combination`` adds, in words (the catalogue shows it)."""
    return Setting(name, int, default, help, metavar, lo=lo, hi=hi, odd=odd, rule=rule)


def Float(name: str, default, help: str, lo=None, hi=None, hi_open: bool = False,
          positive: bool = False, metavar: str = "X") -> Setting:
    """A number in [lo, hi] (or [lo, hi) with ``hi_open``), or any finite number > 0
    (``positive``, optionally <= hi)."""
    return Setting(name, float, default, help, metavar, lo=lo, hi=hi, hi_open=hi_open,
                   positive=positive)


def Choice(name: str, default: str, choices, help: str, metavar: str = "MODE") -> Setting:
    return Setting(name, str, default, help, metavar, choices=tuple(choices))


def Text(name: str, default, help: str, metavar: str = "SPEC") -> Setting:
    """Free text that the piece parses and checks itself (``check_combination``)."""
    return Setting(name, str, default, help, metavar)


def Layers(name: str, default: str, what: str = "", note: str = "", help: Optional[str] = None,
           metavar: str = "LAYERS") -> Setting:
    """The piece's layer list: ``'0,1,2'``, ``'0-2'``, ``'all'`` (0-based from the embeddings).
    The help is derived: ``what`` names the layers (``"encoder layers with CSAN"``), ``note``
    explains the default (``"the lower 3 layers"``)."""
    if help is None:
        help = (f"{what}: 0-based layers such as '0', '0,1,2', '0-2', or 'all' "
                f"(default {default!r}{', ' + note if note else ''})")
    return Setting(name, str, default, help, metavar, role=LAYERS)


def Sides(name: str, default: str, what: str = "", note: str = "", help: Optional[str] = None,
          metavar: str = "SIDES") -> Setting:
    """The self-attentions the piece applies to: ``'encoder'``, ``'decoder'``,
    ``'encoder,decoder'`` (alias ``'both'``). The help is derived from ``what`` (the piece,
    ``"relative positions"``) and ``note``."""
    if help is None:
        help = (f"{what} in the self-attention of: 'encoder', 'decoder' or 'encoder,decoder' "
                f"(alias 'both'){'; ' + note if note else ''} (default {default!r})")
    return Setting(name, str, default, help, metavar, role=SIDES_ROLE)


# ---- layer lists and sides -------------------------------------------------
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


# ---- value checks (the messages every piece flag uses) ---------------------
def require_int(args, attr: str, lo: int, hi: Optional[int] = None, odd: bool = False) -> int:
    """Validate an integer flag ``--attr-name`` and return it."""
    flag = flag_of(attr)
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
    flag = flag_of(attr)
    value = getattr(args, attr)
    if value not in choices:
        raise PieceConfigError(f"{flag} must be one of {list(choices)} (got {value!r})")
    return value


def require_float(args, attr: str, lo: float, hi: float, hi_open: bool = False) -> float:
    flag = flag_of(attr)
    value = getattr(args, attr)
    ok = isinstance(value, (int, float)) and lo <= value and (value < hi if hi_open else value <= hi)
    if not ok:
        raise PieceConfigError(
            f"{flag} must be a number in [{lo}, {hi}{')' if hi_open else ']'} (got {value!r})"
        )
    return float(value)


def require_positive(args, attr: str, hi: Optional[float] = None) -> float:
    """A finite float flag > 0 (and <= hi); raises naming the flag."""
    flag = flag_of(attr)
    value = getattr(args, attr)
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value) and value > 0)
    if ok and hi is not None:
        ok = value <= hi
    if not ok:
        allowed = "> 0, finite" if hi is None else f"in (0, {hi}]"
        raise PieceConfigError(f"{flag} must be a number {allowed} (got {value!r})")
    return float(value)
