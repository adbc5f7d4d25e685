"""Training throughput and peak memory (forward + backward + optimizer step)."""

import torch

from .data import make_train_batches
from .systems import BASELINE, STOCK
from .timing import PeakMemory, Timer, paired_ratios, summarize, sync_device, interleaved

# ---------------------------------------------------------------------------
# Training step: label-smoothed cross-entropy, Adam, fairseq's fp16 scheme
# ---------------------------------------------------------------------------
class MasterAdam:
    """Adam (betas 0.9/0.98 as in the WMT recipes). For fp16/bf16 weights it keeps
    an fp32 master copy and, for fp16, a dynamic loss scale that skips a step on
    overflow -- the same work per step as fairseq's ``--fp16``/``--bf16``."""

    def __init__(self, params, lr=5e-4):
        self.params = [p for p in params if p.requires_grad]
        self.half = self.params[0].dtype != torch.float32
        self.master = [p.detach().float().clone() for p in self.params] if self.half else self.params
        self.scale = 128.0 if self.params[0].dtype == torch.float16 else 1.0
        self.opt = torch.optim.Adam(self.master, lr=lr, betas=(0.9, 0.98), eps=1e-8, foreach=True)
        self.skipped = 0

    def step(self):
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        if self.half:
            grads = [g.float() for g in grads]
        if self.scale != 1.0:
            torch._foreach_mul_(grads, 1.0 / self.scale)
            norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
            if not torch.isfinite(norm):  # overflow: skip, lower the scale (fairseq does the same)
                self.scale /= 2.0
                self.skipped += 1
                self.zero_grad()
                return
        for m, g in zip(self.master, grads):
            m.grad = g
        self.opt.step()
        if self.half:
            with torch.no_grad():
                torch._foreach_copy_(self.params, self.master)
        self.zero_grad()

    def zero_grad(self):
        for p in self.params:
            p.grad = None
        for m in self.master:
            m.grad = None

    def state_bytes(self) -> int:
        n = sum(p.numel() * p.element_size() for p in self.params)
        if self.half:
            n += sum(m.numel() * m.element_size() for m in self.master)
        for st in self.opt.state.values():
            n += sum(t.numel() * t.element_size() for t in st.values() if torch.is_tensor(t))
        return n


def train_step(model, opt: MasterAdam, batch, label_smoothing=0.1, update=True):
    """Forward + backward of one batch; the optimizer steps when ``update`` (the last batch
    of an ``--update-freq`` group: gradients of the others accumulate, as in fairseq)."""
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

    net_output = model(**batch["net_input"])
    lprobs = model.get_normalized_probs(net_output, log_probs=True)
    target = batch["target"]
    loss, _ = label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1),
                                      label_smoothing, ignore_index=model.decoder.padding_idx)
    (loss * opt.scale).backward()
    if update:
        opt.step()


def run_pass(model, opt, batches, update_freq: int):
    """One pass over ``batches``, one optimizer step per ``update_freq`` batches."""
    for i, b in enumerate(batches):
        train_step(model, opt, b, update=(i + 1) % update_freq == 0 or i == len(batches) - 1)



def bench_train(models, d, cfg, device, seed, log, tgt_d=None, lengths=None):
    """Training throughput, interleaved; each system's ratio to stock fairseq and, where the plugin's
    baseline (:data:`.systems.BASELINE`) is measured, to it (``ratio_to_baseline``: the Table 1 rows' ratio)."""
    batches = make_train_batches(d, cfg["max_tokens"], cfg["n_batches"], cfg["max_src"], seed, device, tgt_d,
                                 lengths)
    ntokens = sum(b["ntokens"] for b in batches)
    log(f"train: {len(batches)} batches, {ntokens} target tokens, "
        f"{sum(b['nsentences'] for b in batches)} sentences per pass")
    uf = cfg.get("update_freq", 1)
    opts = {}
    for name, m in models.items():  # warm-up passes (allocator, kernels, compilation, Adam state)
        m.train()
        opts[name] = MasterAdam(m.parameters())
        for _ in range(cfg.get("warmup", 1)):
            run_pass(m, opts[name], batches, uf)
    sync_device(device)
    peaks = {name: 0 for name in models}

    def measure(name, r):
        m, opt = models[name], opts[name]
        with PeakMemory(device) as mem:
            timer = Timer(device).start()
            for _ in range(cfg["passes"]):
                run_pass(m, opt, batches, uf)
            dt = timer.stop()
        peaks[name] = max(peaks[name], mem.peak_bytes)
        return ntokens * cfg["passes"] / dt

    runs = interleaved(list(models), cfg["repeats"], measure, log)
    out = {"batches": len(batches), "tokens_per_pass": ntokens, "passes": cfg["passes"],
           "update_freq": uf, "timer": "cuda events" if device.type == "cuda" else "perf_counter",
           "repeats": cfg["repeats"], "rounds": cfg["repeats"], "systems": {}}
    ref = runs[STOCK]
    if BASELINE in runs:
        out["baseline"] = BASELINE
    for name in models:
        static = opts[name].state_bytes()
        out["systems"][name] = {
            "tokens_per_s": summarize(runs[name]),
            "ratio": paired_ratios(runs[name], ref),
            "peak_mem_mb": (static + peaks[name]) / 2**20,
            "static_mem_mb": static / 2**20,
            "skipped_steps": opts[name].skipped,
        }
        if BASELINE in runs:
            out["systems"][name]["ratio_to_baseline"] = paired_ratios(runs[name], runs[BASELINE])
    ref_mem = out["systems"][STOCK]["peak_mem_mb"]
    for name in models:
        e = out["systems"][name]
        e["mem_ratio"] = e["peak_mem_mb"] / ref_mem if ref_mem > 0 else float("nan")
    return out




# ---------------------------------------------------------------------------
# Stock base vs big: does the benchmark measure the model's work?
# ---------------------------------------------------------------------------
def train_flops(sizes: dict, vocab: int, batches) -> float:
    """Matmul FLOPs of one training pass (forward + backward = 3 x forward) of a fairseq
    encoder-decoder Transformer over ``batches`` (padded shapes: padding is computed too).

    Per token and layer, forward: encoder ``2 (4 d^2 + 2 d f) + 4 S d`` (projections, FFN,
    q k^T and p v over S keys); decoder ``2 (8 d^2 + 2 d f) + 4 T d + 4 S d`` (self- and
    cross-attention); output projection ``2 d V`` per target position."""
    d, f, n = sizes["embed"], sizes["ffn"], sizes["layers"]
    total = 0.0
    for b in batches:
        B, S = b["net_input"]["src_tokens"].shape
        T = b["target"].size(1)
        enc = B * S * n * (2 * (4 * d * d + 2 * d * f) + 4 * S * d)
        dec = B * T * n * (2 * (8 * d * d + 2 * d * f) + 4 * T * d + 4 * S * d)
        total += enc + dec + B * T * 2 * d * vocab
    return 3.0 * total


def bench_scaling(models, sizes, d, cfg, device, seed, log):
    """Stock base and big on the same batches: measured time ratio big/base per round
    (median, spread) next to the FLOP ratio. On a saturated GPU they should agree; a time
    ratio far below the FLOP ratio means the benchmark times overhead, not the model."""
    batches = make_train_batches(d, cfg["max_tokens"], cfg["n_batches"], cfg["max_src"], seed, device)
    uf = cfg.get("update_freq", 1)
    opts = {}
    for name, m in models.items():
        m.train()
        opts[name] = MasterAdam(m.parameters())
        for _ in range(cfg.get("warmup", 1)):
            run_pass(m, opts[name], batches, uf)
    sync_device(device)

    def measure(name, r):
        timer = Timer(device).start()
        for _ in range(cfg["passes"]):
            run_pass(models[name], opts[name], batches, uf)
        return timer.stop()

    log(f"scaling: stock base vs big, {len(batches)} batches x update-freq {uf}")
    runs = interleaved(list(models), cfg["repeats"], measure, log)
    flops = {name: train_flops(sizes[name], len(d), batches) for name in models}
    return {"seconds": {name: summarize(runs[name]) for name in models},
            "time_ratio": paired_ratios(runs["big"], runs["base"]),
            "flop_ratio": flops["big"] / flops["base"],
            "flops_per_pass": flops, "passes": cfg["passes"], "update_freq": uf, "rounds": cfg["repeats"]}
