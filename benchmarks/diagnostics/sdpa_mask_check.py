"""GPU diagnostic: which SDPA backend / mask layout gives right fp16 gradients for a
CSAN-1D-like mask (window & key padding, left-padded batch, broadcast over heads)?

Compares out, dq, dk, dv of F.scaled_dot_product_attention in fp16 against the
fp32 math backend on the same inputs. Usage: python benchmarks/diagnostics/sdpa_mask_check.py
"""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def case(B=8, H=4, T=22, D=16, half=5, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    do = torch.randn(B, H, T, D, generator=g)
    lengths = T - torch.tensor([3, 2, 2, 2, 1, 0, 0, 0])
    pad = torch.arange(T)[None, :] < (T - lengths)[:, None]  # left padding, True = pad
    pos = torch.arange(T)
    window = (pos[:, None] - pos[None, :]).abs() <= half
    allowed = window[None, None] & ~pad[:, None, None, :]  # (B, 1, T, T)
    empty = ~allowed.any(-1, keepdim=True)
    allowed = allowed | empty
    return q, k, v, do, allowed, empty


def run(q, k, v, do, mask, empty, dtype, backend=None, strided=False):
    q, k, v, do = (t.cuda().to(dtype).requires_grad_(t is not do) for t in (q, k, v, do))
    leaves = (q, k, v)
    if strided == "TBHD":  # (B, H, T, D) views of (T, B, H, D) storage, as the attention core makes them
        q, k, v = (t.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3) for t in (q, k, v))
    elif strided == "BTHD":  # first layer: fairseq transposes (B, T, C) to (T, B, C) before it
        q, k, v = (t.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3) for t in (q, k, v))
    mask = mask.cuda()
    if mask.dtype != torch.bool:
        mask = mask.to(dtype)
    ctx = sdpa_kernel([backend]) if backend is not None else torch.enable_grad()
    with ctx:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = out.masked_fill(empty.cuda(), 0.0)
    out.backward(do)
    return [t.float().cpu() for t in (out,) + tuple(x.grad for x in leaves)]


def main():
    q, k, v, do, allowed, empty = case()
    H = q.size(1)
    ref = run(q.double(), k.double(), v.double(), do.double(), allowed, empty, torch.float32, SDPBackend.MATH)
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
    layouts = {
        "bool B1TS": allowed,
        "bool BHTS": allowed.expand(-1, H, -1, -1).contiguous(),
        "float B1TS": additive,
        "float BHTS": additive.expand(-1, H, -1, -1).contiguous(),
    }
    backends = {"default": None, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    for dtype, strided in ((torch.float16, "BTHD"), (torch.float16, "TBHD"), (torch.float16, "BHTD")):
        for lname, mask in layouts.items():
            for bname, backend in backends.items():
                try:
                    res = run(q, k, v, do, mask, empty, dtype, backend, strided)
                    errs = [float((a - b).norm() / b.norm()) for a, b in zip(res, ref)]
                    txt = " ".join(f"{n}={e:.1e}" for n, e in zip(("out", "dq", "dk", "dv"), errs))
                    flag = "BAD" if max(errs) > 3e-2 else "ok"
                except Exception as e:  # backend not available for this input
                    txt, flag = f"unavailable ({type(e).__name__})", "-"
                print(f"{str(dtype)[6:]:9s} {strided} {lname:11s} {bname:9s} {flag:3s} {txt}", flush=True)


if __name__ == "__main__":
    main()
