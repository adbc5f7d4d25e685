"""The Triton path: a layer whose only piece declares a bias of the distance (t5bias's table by
bucket, alibi's slopes) or Shaw's key table (relpos ``k``) runs its whole attention through
the Triton flash kernels (:mod:`.triton_launch`): no (B, H, T, S) tensor, the tables'
gradients without atomics. CUDA only, with triton importable (checked without importing it).

``auto`` takes it for the forms the policy lists in ``triton_forms``, none by default: the
kernels are built and tested on CPU under Triton's interpreter, but no GPU has timed them yet
(benchmarks/gpu_checks.sh is the prepared run that does; :class:`..policy.Policy`). A layer
given ``Policy(triton_forms=("bias_kernel", "keys"))`` takes it on CUDA for every call it runs:
encoder self-attention (queries = keys, no fairseq ``attn_mask``, no attention dropout).
"""

from dataclasses import dataclass
from importlib.util import find_spec
from typing import Tuple

from ..base import CUDA, PiecePath
from .triton_launch import triton_attention


@dataclass(frozen=True)
class TritonDistance(PiecePath):
    name = "triton distance"
    takes = "triton"
    unavailable = None if find_spec("triton") else "triton is not installed (pip install triton)"
    no_dropout = "the kernels have no dropout"
    queries_are_keys = True
    no_attn_mask = "the kernels take the padding and the causal flag, not fairseq's mask"
    devices: Tuple[str, ...] = CUDA
    #: the properties of the layer's distance form it is taken for (``Policy.triton_forms``)
    forms: Tuple[str, ...] = ()

    def not_supported_reasons(self, layer, call):
        reasons = super().not_supported_reasons(layer, call)
        if not (layer.distance is not None and any(getattr(layer.distance, f) for f in self.forms)):
            listed = "/".join(self.forms) or "none: unmeasured on a GPU"
            reasons.append(f"distance terms not among the policy's triton_forms ({listed})")
        return reasons

    def piece_attention(self, piece, q, k, v, ctx, run):
        return triton_attention(piece.distance_terms(), q, k, v, run.scale, ctx.key_padding_mask)
