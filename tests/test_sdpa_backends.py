"""The guard that keeps cuDNN attention away from piece-made masks on CUDA."""

from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from fairseq_attn_core.backends import sdpa as core


def test_cpu_and_fairseq_masks_keep_torch_default():
    q = torch.zeros(1)
    mask = torch.ones(1, dtype=torch.bool)
    assert isinstance(core.sdpa_backends(q, mask, True), nullcontext)  # CPU
    cuda_q = SimpleNamespace(is_cuda=True)
    assert isinstance(core.sdpa_backends(cuda_q, mask, False), nullcontext)  # fairseq's own mask
    assert isinstance(core.sdpa_backends(cuda_q, None, True), nullcontext)  # no mask at all


@pytest.mark.skipif(core.sdpa_kernel is None, reason="torch without torch.nn.attention")
def test_piece_masks_on_cuda_exclude_cudnn():
    cuda_q = SimpleNamespace(is_cuda=True)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    with core.sdpa_backends(cuda_q, torch.ones(1, dtype=torch.bool), True):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
