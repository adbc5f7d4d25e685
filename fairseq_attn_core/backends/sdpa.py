"""The fused path (:class:`Fused`): ``torch.nn.functional.scaled_dot_product_attention`` with one mask.

The pieces' additive bias and boolean "allowed" mask become one SDPA mask
(:func:`sdpa_mask`); torch then picks its kernel (flash / memory-efficient / math,
cuDNN on recent GPUs), except that cuDNN is kept away from masks that pieces made
(:func:`sdpa_backends`).
"""

from contextlib import nullcontext
from typing import Optional

import torch.nn.functional as F
from torch import Tensor

from .base import HookPath

try:  # torch >= 2.3
    from torch.nn.attention import SDPBackend, sdpa_kernel

    _NO_CUDNN = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
except ImportError:  # pragma: no cover - older torch has no cuDNN attention backend
    sdpa_kernel = None


def sdpa_backends(q: Tensor, mask: Optional[Tensor], piece_shaped: bool):
    """Context for the fused call: keep cuDNN attention away from masks/biases made by pieces.

    On an H100 (torch 2.11, cuDNN backend chosen by default) a 1D-CSAN model trained in
    fp16 got wrong q/k gradients (~100% relative error) from the cuDNN kernel, while the
    memory-efficient and math kernels agreed with the explicit path
    (benchmarks/diagnostics/csan1d_fp16_probe.py, benchmarks/RESULTS.md). fairseq's own
    masks (padding, future mask) keep torch's default choice, as in stock fairseq.
    """
    if sdpa_kernel is not None and piece_shaped and mask is not None and q.is_cuda:
        return sdpa_kernel(_NO_CUDNN)
    return nullcontext()


def sdpa_mask(bias: Optional[Tensor], allowed: Optional[Tensor], dtype) -> Optional[Tensor]:
    """One SDPA mask: ``allowed`` (bool, True = may attend) alone, or ``bias`` in ``dtype``
    with -inf where ``allowed`` is False."""
    if bias is None:
        return allowed
    mask = bias.to(dtype)
    if allowed is not None:
        mask = mask.masked_fill(~allowed, float("-inf"))
    return mask


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], scale: float,
                   dropout_p: float) -> Tensor:
    """``softmax(scale q k^T + mask) v`` as (B, H, T, D)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                          scale=scale)



class Fused(HookPath):
    name = "fused"
    fused_pieces_only = True

    def attend(self, q, k, v, scores, ctx, run):
        mask = sdpa_mask(scores.bias, scores.allowed, q.dtype)
        with sdpa_backends(q, mask, scores.piece_made):
            return sdpa_attention(q, k, v, mask, run.scale, run.dropout_p), None
