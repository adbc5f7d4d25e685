"""GPU diagnostic: one CSAN-1D SelfAttention layer in fp16, fused vs explicit,
per SDPA backend; relative error of the output and of each gradient vs fp32 explicit."""

import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
from attn_helpers import make_args, make_attention, padded_batch  # noqa: E402


def grads(pieces, backend, dtype, sdpa=None, lengths=(37, 30, 12, 5, 3, 37), embed=64):
    args = make_args(pieces, layers=3)
    attn = make_attention(args, embed_dim=embed, num_heads=4, backend=backend, dtype=dtype).cuda()
    x, kpm = padded_batch(list(lengths), embed_dim=embed)
    x = x.cuda().to(dtype).requires_grad_()
    kpm = kpm.cuda()
    ctx = sdpa_kernel([sdpa]) if sdpa is not None else torch.enable_grad()
    with ctx:
        out, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
    g = torch.Generator().manual_seed(5)
    do = torch.randn(out.shape, generator=g).cuda().to(dtype)
    real = (~kpm).t()[:, :, None]  # only real tokens matter
    (out * real * do).sum().backward()
    res = {"out": (out * real).float().detach().cpu(), "dx": (x.grad * real).float().cpu()}
    for n, p in attn.named_parameters():
        if n != "k_proj.bias":  # its exact gradient is ~0 (softmax shift invariance)
            res[n] = p.grad.float().cpu()
    return res


for pieces in ("", "csan1d", "csan2d"):
    ref = grads(pieces, "explicit", torch.float32)
    for backend, sdpa in (("explicit", None), ("fused", None), ("fused", SDPBackend.EFFICIENT_ATTENTION),
                          ("fused", SDPBackend.CUDNN_ATTENTION), ("fused", SDPBackend.MATH)):
        try:
            r = grads(pieces, backend, torch.float16, sdpa)
            errs = {k: float((r[k] - ref[k]).norm() / ref[k].norm().clamp_min(1e-9)) for k in ref}
            worst = max(errs, key=errs.get)
            print(f"{pieces or 'none':7s} {backend:8s} {str(sdpa):28s} worst {worst}={errs[worst]:.1e} "
                  f"out={errs['out']:.1e} dx={errs['dx']:.1e}", flush=True)
        except Exception as e:
            print(f"{pieces or 'none':7s} {backend:8s} {str(sdpa):28s} unavailable: {type(e).__name__}: {e}"[:200])
