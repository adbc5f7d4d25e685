"""The Triton path: a layer whose only piece declares a bias of the distance (t5bias's table by
bucket, alibi's slopes) or Shaw's tables (relpos k, kv, tied) runs its whole attention through
the Triton flash kernels (:mod:`.triton_launch`): no (B, H, T, S) tensor, the tables'
gradients without atomics. CUDA, with triton importable (checked without importing it); on CPU
tensors only under Triton's interpreter (``TRITON_INTERPRET=1`` set before the process starts:
the tests).

``--attn-backend triton`` forces it (:data:`FORCED`): every call it runs, encoder
self-attention and the decoder's masked self-attention (fairseq's ``attn_mask`` there is the
future mask: read as the kernels' causal flag, checked once per mask); the calls it does not
run (incremental decoding, attention weights requested) go to the SDPA paths. Where it cannot
run a layer at all (no CUDA, no triton, a head size above the kernels' largest config, pieces
whose terms it does not run) the model build refuses the flag (:func:`forced_refusals`).

``auto`` takes it for the forms the policy lists in ``triton_forms``, none by default: no GPU
has timed the kernels yet (benchmarks/gpu_checks.sh is the prepared run that does;
:class:`..policy.Policy`).
"""

import os
from dataclasses import dataclass
from importlib.util import find_spec
from typing import List, Optional, Tuple

import torch

from ..base import CPU, CUDA, PiecePath
from .triton_configs import SMALL
from .triton_launch import triton_attention

#: Triton's interpreter runs the kernels on CPU tensors (set before Python starts: triton reads it at import)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
#: the devices whose tensors the kernels take
DEVICES = CPU + CUDA if INTERPRETED else CUDA
NO_TRITON = None if find_spec("triton") else "triton is not installed (pip install triton)"


@dataclass(frozen=True)
class TritonDistance(PiecePath):
    name = "triton distance"
    takes = "triton"
    unavailable = NO_TRITON
    no_dropout = "the kernels have no dropout"
    queries_are_keys = True
    devices: Tuple[str, ...] = DEVICES
    #: the properties of the layer's distance form it is taken for (``Policy.triton_forms``;
    #: ``("triton",)``: every form the kernels run, :data:`FORCED`)
    forms: Tuple[str, ...] = ()

    def not_supported_reasons(self, layer, call):
        reasons = super().not_supported_reasons(layer, call)
        if not (layer.distance is not None and any(getattr(layer.distance, f) for f in self.forms)):
            listed = "/".join(self.forms) or "none: unmeasured on a GPU"
            reasons.append(f"distance terms not among the policy's triton_forms ({listed})")
        return reasons

    def piece_attention(self, piece, q, k, v, ctx, run):
        causal = run.attn_mask is not None and causal_mask(run.attn_mask)
        configs = None if q.is_cuda else SMALL  # the interpreter's tiles on CPU tensors
        return triton_attention(piece.distance_terms(), q, k, v, run.scale, ctx.key_padding_mask, causal, configs)


#: ``--attn-backend triton``'s path: every form the kernels run
FORCED = TritonDistance(forms=("triton",))

_CHECKED_MASKS = {}


def causal_mask(attn_mask) -> bool:
    """fairseq's (T, T) ``attn_mask`` read as the kernels' causal flag: it must be the future
    mask (-inf or True above the diagonal, 0 or False elsewhere); anything else is refused in one
    line. Checked once per mask storage, shape and version (fairseq slices one buffered mask per
    length), so a step does not wait on the device."""
    key = (attn_mask.device, attn_mask.data_ptr(), tuple(attn_mask.shape), attn_mask._version, attn_mask.dtype)
    if key not in _CHECKED_MASKS:
        T, S = attn_mask.shape
        future = torch.ones(T, S, dtype=torch.bool, device=attn_mask.device).triu(1 + S - T)
        masked = attn_mask if attn_mask.dtype == torch.bool else torch.isneginf(attn_mask)
        zero = attn_mask.dtype == torch.bool or bool((attn_mask.masked_fill(future, 0) == 0).all())
        if not (zero and torch.equal(masked, future)):
            raise ValueError("--attn-backend triton: the layer's attn_mask is not the decoder's future mask "
                             "(the kernels read it as the causal flag); use --attn-backend auto")
        if len(_CHECKED_MASKS) > 64:
            _CHECKED_MASKS.clear()
        _CHECKED_MASKS[key] = True
    return True


def device_refusals(dropout_p: float) -> List[str]:
    """Why ``--attn-backend triton`` cannot run any layer here (triton, dropout, the device)."""
    reasons = FORCED.model_reasons((), dropout_p)
    if not INTERPRETED and not torch.cuda.is_available():
        reasons.append("no CUDA device (the kernels run on CUDA; TRITON_INTERPRET=1 runs them on CPU "
                       "tensors, slowly: the tests)")
    return reasons


def layer_refusals(distance, piece_names, head_dim: int) -> List[str]:
    """Why ``--attn-backend triton`` cannot run a layer with ``piece_names`` (its only piece's
    distance form ``distance``; ``None``: none declared) and ``head_dim`` (empty: it can; a
    layer without pieces runs the SDPA paths, as stock fairseq)."""
    from .triton_configs import configs_for

    reasons = []
    if piece_names and not (distance is not None and distance.triton):
        reasons.append(f"pieces {list(piece_names)} declare no distance terms the kernels run (one piece "
                       f"alone in its layer: t5bias, alibi or relpos)")
    try:
        configs_for(head_dim)
    except ValueError as e:
        reasons.append(str(e))
    return reasons


def training_refusal(cpu: bool) -> Optional[str]:
    """Why a training on CPU (``cpu``) cannot run ``--attn-backend triton`` (``None``: it can)."""
    if cpu and not INTERPRETED:
        return ("--attn-backend triton: the Triton kernels run on CUDA and this training runs on CPU; "
                "train on CPU with --attn-backend auto, fused or explicit")
    return None
