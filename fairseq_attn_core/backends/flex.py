"""The generic ``flex_attention`` plumbing, and the block-sparse band path.

``torch.nn.attention.flex_attention`` runs attention with a ``score_mod`` (a function of
the score and its (b, h, i, j) indices) and a block mask (blocks of keys a query block
never sees are skipped), never materialising the (B, H, T, S) probability matrix on the
GPU (one compiled Triton kernel on CUDA; on CPU it runs eagerly, densely, which is what
the exactness tests use). This module holds what every flex computation shares:

* :func:`call`: one fused call, optionally returning the log-sum-exp;
* :func:`block_mask`: ``create_block_mask``, reused across the layers of one forward;
* :func:`split_attn_mask`, :func:`layer_mask` (:func:`padding_mod`, :func:`padding_keep_mod`):
  fairseq's masks as a ``mask_mod`` and its block mask;
* :func:`masked_attention`: the **band path**: any dense boolean ``allowed`` mask and
  additive ``bias`` (1D-/2D-CSAN windows, band masks generally) as a ``mask_mod`` /
  ``score_mod``; ``create_block_mask`` marks the key blocks outside the band, which the
  kernel skips: O(T * window) work instead of O(T^2).

and the band path :class:`FlexBand` (the flex piece path, distance terms as score_mods:
:mod:`.distance.flex_forms`). flex_attention has no attention dropout: the chooser (:mod:`.`) takes
a flex path only with dropout 0. ``--attn-flex-compile`` decides
how ``flex_attention`` is compiled (:func:`kernel`: inductor on CUDA by default); the
calls keep one form per layer kind so that the number of compiled graphs stays bounded
over batch shapes (docs/explanation/architecture.md, tests/test_flex_compile.py).

``torch._dynamo`` (about a second to import, with inductor and sympy) is imported by the
first compiled call (:func:`_run_compiled`, ``torch.compile``), not with this module: every
process importing the plugin would pay for it otherwise. ``torch.nn.attention.flex_attention``
itself is cheap to import and does not import dynamo (tests/test_import_cost.py).
"""

import weakref
from collections import OrderedDict
from typing import Optional

import torch
from torch import Tensor
from torch.fx.experimental import _config as _fx_config

from ..settings import PieceConfigError
from .base import HookPath, Path

try:  # torch >= 2.5 (AuxRequest: 2.9)
    import torch.nn.attention.flex_attention as _flex_mod
    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask

    HAVE_FLEX = True
except ImportError:  # pragma: no cover - older torch
    HAVE_FLEX = False

#: ``--attn-flex-compile``: how ``flex_attention`` is wrapped in ``torch.compile``
COMPILE_MODES = ("auto", "inductor", "aot_eager", "none")
#: the torch.compile backend of each mode (a test may wrap one to count its graphs)
COMPILE_BACKENDS = {"inductor": "inductor", "aot_eager": "aot_eager"}
_compiled = {}


def compile_backend(mode: str, on_cuda: bool) -> Optional[str]:
    """The torch.compile backend of ``--attn-flex-compile mode`` (``None``: eager).
    ``auto``: inductor on CUDA (the fused kernel), eager elsewhere (inductor has no
    flex_attention backward on CPU)."""
    if mode == "auto":
        return "inductor" if on_cuda else None
    return None if mode == "none" else mode


def kernel(q: Tensor, mode: str = "auto"):
    """flex_attention, compiled as ``--attn-flex-compile mode`` says for ``q``'s device.

    One compiled function per backend, with dynamic shapes (``dynamic=True``): batch size
    and lengths are symbols, not guards, so a new batch shape reuses the graph. What
    remains guarded is each call's *form* (which score_mod / mask_mod functions, which
    of their captured tensors exist, ``return_aux``): the pieces keep one form per layer
    configuration (:func:`padding_mod`, :func:`padding_future_mod`, their own score_mods
    with every captured value a tensor), and :func:`call` passes contiguous inputs."""
    backend = compile_backend(mode, q.is_cuda)
    if backend is None:
        return _flex_mod.flex_attention
    fn = _compiled.get(backend)
    if fn is None:
        fn = _compiled[backend] = torch.compile(_flex_mod.flex_attention,
                                                backend=COMPILE_BACKENDS[backend], dynamic=True)
    return fn


#: the one-line refusal of a flex path in a CPU training step
CPU_TRAINING = ("--attn-backend flex: FlexAttention has no backward on CPU (torch refuses it), so "
                "a CPU training step cannot run it; train on CPU with --attn-backend auto, fused or "
                "explicit (a checkpoint trained so runs --attn-backend flex for inference)")
_backward_probe = {}


def cpu_backward_ok() -> bool:
    """Whether this torch runs flex_attention's backward on CPU (probed once per version
    of torch's device check: 2.13 refuses it)."""
    check = getattr(_flex_mod, "_validate_device", None)
    if check not in _backward_probe:
        q = torch.zeros(1, 1, 1, 16, requires_grad=True)
        try:
            _flex_mod.flex_attention(q, q, q).sum().backward()
            _backward_probe[check] = True
        except NotImplementedError:
            _backward_probe[check] = False
    return _backward_probe[check]


def check_training_device(backend: str, cpu: bool) -> None:
    """Refuse training ``--attn-backend backend`` on CPU where torch has no flex_attention
    backward (:data:`CPU_TRAINING`): called by the training commands before anything is
    trained or written (the model build cannot tell training from generation)."""
    if backend == "flex" and cpu and not cpu_backward_ok():
        raise PieceConfigError(CPU_TRAINING)


_MASK_CACHE: "OrderedDict[tuple, tuple]" = OrderedDict()
_MASK_CACHE_SIZE = 8


def block_mask(mask_mod, B: Optional[int], T: int, S: int, device, key=None, tensors=()):
    """``create_block_mask``, reused across the layers of one forward: the layers of an
    encoder (decoder) see the same padding (future) mask tensors. ``key`` names the mask
    function's other inputs; ``tensors`` are the mask tensors it reads, matched by
    identity (weak references: a freed tensor never matches) and in-place version."""
    if key is None:
        return create_block_mask(mask_mod, B, None, T, S, device=device)
    full_key = (key, B, T, S, str(device),
                tuple((id(t), t._version) if t is not None else None for t in tensors))
    hit = _MASK_CACHE.get(full_key)
    if hit is not None and all((r is None and t is None) or (r is not None and r() is t)
                               for r, t in zip(hit[0], tensors)):
        _MASK_CACHE.move_to_end(full_key)
        return hit[1]
    bm = create_block_mask(mask_mod, B, None, T, S, device=device)
    _MASK_CACHE[full_key] = (tuple(weakref.ref(t) if t is not None else None for t in tensors), bm)
    while len(_MASK_CACHE) > _MASK_CACHE_SIZE:
        _MASK_CACHE.popitem(last=False)
    return bm


def call(q, k, v, score_mod, mask, scale, lse: bool = False, compile: str = "none"):
    """One fused call; returns ``out`` or ``(out, lse)``; lse is -inf on rows with no key.
    ``compile``: ``--attn-flex-compile`` (:func:`kernel`); see :func:`_run_compiled`."""
    run = kernel(q, compile)
    kw = dict(score_mod=score_mod, block_mask=mask, scale=scale)
    if lse:
        kw["return_aux"] = AuxRequest(lse=True)
    if run is _flex_mod.flex_attention:
        out = run(q, k, v, **kw)
    else:
        out = _run_compiled(run, q, k, v, score_mod, mask, kw)
    return (out[0], out[1].lse) if lse else out


def _run_compiled(run, q, k, v, score_mod, mask, kw):
    """The compiled call in the form that keeps its graph across batch shapes: contiguous
    q, k, v (the head views are permuted: their strides would be guarded), every tensor
    the score_mod / mask_mod capture marked dynamic (else the first call's sizes are
    guarded), and sizes 0/1 not specialised (``backed_size_oblivious``: a batch of one
    sentence or a one-token decoding step reuses the general graph)."""
    captured = _captured(score_mod, CAPTURED) + _captured(getattr(mask, "mask_mod", None), CAPTURED)
    numbers = [x for x in captured if not isinstance(x, Tensor)]
    if numbers:  # inductor lowers them as symbols without a dtype (an error at compile time)
        raise TypeError(f"flex_attention: the score_mod / mask_mod captures the Python number(s) "
                        f"{numbers}; a compiled call needs every captured value a tensor "
                        f"(torch.tensor(x, device=q.device))")
    import torch._dynamo  # here, not at module import (module docstring)

    q, k, v = _dense(q), _dense(k), _dense(v)
    for t in (q, k, v):  # batch and length
        torch._dynamo.maybe_mark_dynamic(t, [0, 2])
    for t in captured:
        if t.dim():
            torch._dynamo.maybe_mark_dynamic(t, list(range(t.dim())))
    with _fx_config.patch(backed_size_oblivious=True):
        return run(q, k, v, **kw)


def _dense(t: Tensor) -> Tensor:
    """``t`` with the row-major strides of its shape (``contiguous()`` keeps odd strides on
    size-1 dimensions, e.g. one decoding step's queries)."""
    expected, step = [], 1
    for size in reversed(t.shape):
        expected.append(step)
        step *= size
    if list(t.stride()) == expected[::-1]:
        return t
    return t.clone(memory_format=torch.contiguous_format) if t.is_contiguous() else t.contiguous()


#: what a compiled score_mod / mask_mod may capture (tensors) and must not (Python numbers,
#: refused; a bool is a constant to dynamo, not collected)
CAPTURED = (Tensor, int, float)


def _captured(fn, kinds, depth: int = 0) -> list:
    """The values of type ``kinds`` a score_mod / mask_mod closure holds (also through
    captured functions); booleans are not numbers here."""
    found = []
    for cell in getattr(fn, "__closure__", None) or ():
        value = cell.cell_contents
        if isinstance(value, kinds) and not isinstance(value, bool):
            found.append(value)
        elif callable(value) and not isinstance(value, Tensor) and depth < 3:
            found += _captured(value, kinds, depth + 1)
    return found


def masked_attention(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor],
                     allowed: Optional[Tensor], scale: float, compile: str = "none") -> Tensor:
    """``softmax(scale q k^T + bias, ~allowed) v`` with blocks outside ``allowed`` skipped.

    q: (B, H, T, D), k, v: (B, H, S, D); bias (float) and allowed (bool, True = may attend)
    broadcastable to (B, H, T, S) with leading dims of size B|1 and H|1. Both are laid out
    as contiguous (B, H|1, T, S) tensors (a copy over the batch where they had none), so
    the score_mod / mask_mod have one form, and one stride pattern, whatever the padding
    of the batch."""
    B, H, T, _ = q.shape
    S = k.size(2)

    def per_batch(x):  # (B|1, H|1, T, S) -> contiguous (B, H|1, T, S), not a view: one layout
        x = x.view(*([1] * (4 - x.dim())), *x.shape).expand(B, -1, T, S)
        return x.clone(memory_format=torch.contiguous_format) if x._base is not None or \
            not x.is_contiguous() else x

    score_mod = tensor_bias_mod(per_batch(bias), bias.dim() == 4 and bias.size(1) > 1) \
        if bias is not None else None
    mask = None
    if allowed is not None:
        per_head = allowed.dim() == 4 and allowed.size(1) > 1
        mask = create_block_mask(tensor_mask_mod(per_batch(allowed), per_head), B,
                                 H if per_head else None, T, S, device=q.device)
    return call(q, k, v, score_mod, mask, scale, compile=compile)


def tensor_bias_mod(bias: Tensor, per_head: bool):
    """``score_mod``: ``score + bias[b, h or 0, i, j]`` (bias (B, H|1, T, S))."""
    if per_head:
        def score_mod(score, b, h, i, j):
            return score + bias[b, h, i, j]
    else:
        def score_mod(score, b, h, i, j):
            return score + bias[b, 0, i, j]

    return score_mod


def tensor_mask_mod(allowed: Tensor, per_head: bool):
    """``mask_mod``: ``allowed[b, h or 0, i, j]`` (allowed (B, H|1, T, S) bool)."""
    if per_head:
        def mask_mod(b, h, i, j):
            return allowed[b, h, i, j]
    else:
        def mask_mod(b, h, i, j):
            return allowed[b, 0, i, j]

    return mask_mod


def split_attn_mask(attn_mask: Optional[Tensor]):
    """fairseq's (T, S) attention mask -> (additive finite part or None, allowed bool or None)."""
    if attn_mask is None:
        return None, None
    if attn_mask.dtype == torch.bool:
        return None, ~attn_mask
    keep = attn_mask > float("-inf")
    return attn_mask.masked_fill(~keep, 0.0), keep


def padding_mod(kpm: Tensor):
    """``mask_mod``: key j is no pad of row b (``kpm`` (B, S), True = pad)."""
    def allowed(b, h, i, j):
        return ~kpm[b, j]

    return allowed


def padding_keep_mod(kpm: Tensor, keep: Tensor):
    """``mask_mod``: key j is no pad of row b and ``keep[i, j]`` (fairseq's future mask)."""
    def allowed(b, h, i, j):
        return ~kpm[b, j] & keep[i, j]

    return allowed


def layer_mask(kpm: Optional[Tensor], keep: Optional[Tensor], B: int, T: int, S: int, device,
               key, attn_mask: Optional[Tensor]):
    """The (mask_mod, block mask) of a flex piece's layer: padding, and ``keep`` if given.

    Always a block mask over the batch, with a padding tensor (all False when the batch
    has none: fairseq passes ``None`` then), so that a batch with padding and one without
    call flex_attention in the same form. Cached across the layers of one forward (see
    :func:`block_mask`; a made-up padding tensor is not part of the cache key)."""
    given = kpm
    if kpm is None:
        kpm = torch.zeros(B, S, dtype=torch.bool, device=device)
    mod = padding_mod(kpm) if keep is None else padding_keep_mod(kpm, keep)
    return mod, block_mask(mod, B, T, S, device, (key, given is None), (given, attn_mask))


class FlexPath(Path):
    """What both flex paths share: torch's flex_attention, no dropout, no CPU backward."""

    unavailable = None if HAVE_FLEX else "torch has no torch.nn.attention.flex_attention (needs torch >= 2.9)"
    no_dropout = "flex_attention has none"

    def apply(self, q, k, v, ctx, run):
        if ctx.training and torch.is_grad_enabled() and not q.is_cuda and not cpu_backward_ok():
            raise PieceConfigError(CPU_TRAINING)
        return super().apply(q, k, v, ctx, run)


class FlexBand(FlexPath, HookPath):
    """A band-masked layer through block-sparse flex_attention (:func:`masked_attention`)."""

    name = "flex band"
    fused_pieces_only = True
    needs_band = True
    queries_are_keys = True

    def attend(self, q, k, v, scores, ctx, run):
        return masked_attention(q, k, v, scores.bias, scores.allowed, run.scale, run.flex_compile), None
