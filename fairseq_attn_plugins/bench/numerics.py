"""fp16/bf16 numerics check: every architecture, finite, fused/flex == explicit."""

import torch

from .data import make_train_batches
from .report import provenance
from .systems import DTYPES, build_model, discover_systems, make_dictionary

# ---------------------------------------------------------------------------
# fp16 numerics check
# ---------------------------------------------------------------------------
NUMERICS_SIZES = dict(embed=64, ffn=128, heads=4, layers=3)


def run_numerics(device="cuda", dtype="fp16", seed=3, tol=2e-2, systems=None, log=print) -> dict:
    """Every plugin architecture: forward + backward on a padded batch in ``dtype``.

    Checks (a) loss, outputs and every gradient are finite; (b) the fused and the
    explicit backend agree (same weights) within ``tol`` relative error on the
    decoder output and on the gradient norm-wise; (c) both stay near an fp32
    reference built from the same weights (error reported).
    """
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

    device = torch.device(device)
    d = make_dictionary(96)
    batch = make_train_batches(d, 256, 1, 40, seed, device)[0]
    # make sure the batch has padding on both sides
    assert (batch["net_input"]["src_tokens"] == d.pad()).any()
    out = {"device": str(device), "dtype": dtype, "tolerance": tol, "torch": torch.__version__,
           **provenance(), "archs": {}}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)

    def run(model):
        model.train()
        net = model(**batch["net_input"])
        lprobs = model.get_normalized_probs(net, log_probs=True)
        loss, _ = label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), batch["target"].view(-1),
                                          0.1, ignore_index=d.pad())
        scale = 128.0 if DTYPES[dtype] == torch.float16 else 1.0
        (loss * scale).backward()
        named = [(n, p.grad.float().flatten() / scale) for n, p in model.named_parameters()
                 if p.grad is not None]
        names.clear()
        names.extend((n, g.numel()) for n, g in named)
        grads = torch.cat([g for _, g in named])
        mask = batch["target"].ne(d.pad())
        logits = net[0].float()[mask]
        return loss.float().detach(), logits.detach(), grads

    names = []

    def worst_param(a, b):
        """The parameter whose gradients differ most (relative), for diagnosis."""
        best, off = ("", 0.0), 0
        for n, k in names:
            e = rel(a[off: off + k], b[off: off + k]) if not n.endswith("k_proj.bias") else 0.0
            best = max(best, (n, e), key=lambda t: t[1])
            off += k
        return f"{best[0]} ({best[1]:.1e})"

    def rel(a, b):
        return float((a - b).norm() / b.norm().clamp_min(1e-12))

    for s in discover_systems(False, systems)[1:]:
        entry = {}
        try:
            res = {}
            runs = [("explicit", "fp32"), ("auto", dtype), ("explicit", dtype)]
            if device.type == "cuda":  # the compiled flex_attention kernels (relpos kv, windows)
                runs.append(("flex", dtype))
            for backend, dt in runs:
                m = build_model(s.arch, d, NUMERICS_SIZES, seed, dropout=0.0, attn_backend=backend,
                                max_source_positions=256).to(device=device, dtype=DTYPES[dt])
                res[(backend, dt)] = run(m)
                del m
            ref = res[("explicit", "fp32")]
            fused, expl = res[("auto", dtype)], res[("explicit", dtype)]
            finite = all(bool(torch.isfinite(t).all()) for r in (fused, expl) for t in r)
            entry = {
                "finite": finite,
                "fused_vs_explicit_out": rel(fused[1], expl[1]),
                "fused_vs_explicit_grad": rel(fused[2], expl[2]),
                "worst_param": worst_param(fused[2], expl[2]),
                "fused_vs_fp32_out": rel(fused[1], ref[1]),
                "explicit_vs_fp32_out": rel(expl[1], ref[1]),
                "fused_vs_fp32_grad": rel(fused[2], ref[2]),
                "explicit_vs_fp32_grad": rel(expl[2], ref[2]),
            }
            entry["ok"] = bool(finite and entry["fused_vs_explicit_out"] < tol
                               and entry["fused_vs_explicit_grad"] < tol)
            if ("flex", dtype) in res:
                fl = res[("flex", dtype)]
                entry["flex_vs_explicit_out"] = rel(fl[1], expl[1])
                entry["flex_vs_explicit_grad"] = rel(fl[2], expl[2])
                entry["ok"] = bool(entry["ok"] and all(bool(torch.isfinite(t).all()) for t in fl)
                                   and entry["flex_vs_explicit_out"] < tol
                                   and entry["flex_vs_explicit_grad"] < tol)
        except Exception as e:
            entry = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        out["archs"][s.arch] = entry
        log(f"numerics {s.arch}: {'OK' if entry['ok'] else 'FAIL'} {entry}")
    out["ok"] = all(e["ok"] for e in out["archs"].values())
    return out


