"""GPU probe: in a full tiny csan1d model, which SDPA backend gives fused fp16 gradients
that disagree with the explicit path? Prints the relative gradient error per layer's
self-attention k_proj.weight and overall, for each backend restriction."""

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from fairseq_attn_plugins import bench as B
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

dev = torch.device("cuda")
d = B.make_dictionary(96)
batch = B.make_train_batches(d, 256, 1, 40, 3, dev)[0]


def grads(arch, backend, dtype, sdpa=None, scale=128.0):
    m = B.build_model(arch, d, B.NUMERICS_SIZES, 3, dropout=0.0, attn_backend=backend).to(dev, dtype)
    m.train()
    ctx = sdpa_kernel(sdpa) if sdpa else torch.enable_grad()
    with ctx:
        net = m(**batch["net_input"])
        lp = m.get_normalized_probs(net, log_probs=True)
        loss, _ = label_smoothed_nll_loss(lp.view(-1, lp.size(-1)), batch["target"].view(-1), 0.1,
                                          ignore_index=d.pad())
        (loss * scale).backward()
    return {n: p.grad.float() / scale for n, p in m.named_parameters() if p.grad is not None}


def rel(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


for arch in ("transformer_csan1d_wmt_en_de", "transformer_attn_wmt_en_de"):
    ref = grads(arch, "explicit", torch.float32)
    variants = [("fused fp32", "auto", torch.float32, None), ("fused fp16", "auto", torch.float16, None),
                ("fused fp16 scale1", "auto", torch.float16, None),
                ("fused fp16 efficient", "auto", torch.float16, [SDPBackend.EFFICIENT_ATTENTION]),
                ("fused fp16 cudnn", "auto", torch.float16, [SDPBackend.CUDNN_ATTENTION]),
                ("fused fp16 math", "auto", torch.float16, [SDPBackend.MATH]),
                ("fused fp16 no-cudnn", "auto", torch.float16,
                 [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]),
                ("explicit fp16", "explicit", torch.float16, None)]
    for name, backend, dtype, sdpa in variants:
        try:
            g = grads(arch, backend, dtype, sdpa, 1.0 if "scale1" in name else 128.0)
            allg = rel(torch.cat([g[n].flatten() for n in ref]), torch.cat([ref[n].flatten() for n in ref]))
            ks = " ".join(f"L{i}={rel(g[f'encoder.layers.{i}.self_attn.k_proj.weight'], ref[f'encoder.layers.{i}.self_attn.k_proj.weight']):.1e}"
                          for i in range(3))
            worst = sorted(((rel(g[n], ref[n]), n) for n in ref if not n.endswith("k_proj.bias")), reverse=True)[:3]
            print(f"{arch[12:18]} {name:22s} all={allg:.1e} enc k_proj.w {ks} worst {[(n, f'{e:.1e}') for e, n in worst]}", flush=True)
        except Exception as e:
            print(f"{arch[12:18]} {name:22s} failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
