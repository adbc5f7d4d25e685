"""Encoder alone over sequence lengths, forward + backward, fixed tokens per batch."""

import torch

from .systems import STOCK, layer_paths
from .timing import (TensorPeak, Timer, interleaved, long_lived_frozen, paired_ratios, summarize, timed_peak,
                     sync_device)

def bench_sweep(models, cfg, device, seed, log):
    """Encoder alone, forward + backward, fixed tokens per batch, no padding; ``cfg["repeats"]``
    interleaved rounds at each length (recorded as ``rounds``)."""
    g = torch.Generator().manual_seed(seed + 2)
    out = {"tokens_per_batch": cfg["sweep_tokens"], "steps": cfg["sweep_steps"], "rounds": cfg["repeats"], "lengths": {},
           "memory": ("peak bytes of live tensors in one forward + backward, from torch.profiler's "
                      "allocation records" if device.type == "cpu" else
                      "CUDA max allocated over the timed steps")}
    for L in cfg["sweep_lengths"]:
        bsz = max(1, cfg["sweep_tokens"] // L)
        d = next(iter(models.values())).encoder.dictionary
        src = torch.randint(d.nspecial, len(d), (bsz, L), generator=g).to(device)
        lengths = torch.full((bsz,), L, dtype=torch.long, device=device)
        peaks, failed = {}, {}

        def step(m):
            enc = m.encoder(src, src_lengths=lengths)["encoder_out"][0]
            enc.float().square().mean().backward()
            for p in m.parameters():
                p.grad = None

        for name, m in list(models.items()):
            m.train()
            try:
                step(m)
            except torch.cuda.OutOfMemoryError as e:  # reported, not fatal
                failed[name] = f"OOM: {e}".splitlines()[0]
            except Exception as e:  # e.g. a kernel that does not compile: reported, the rest measured
                failed[name] = f"{type(e).__name__}: {e}".splitlines()[0]
        alive = [n for n in models if n not in failed]
        if STOCK not in alive:
            out["lengths"][str(L)] = {"failed": failed}
            continue
        sync_device(device)

        cpu = device.type == "cpu"

        def measure(name, r):
            with timed_peak(device) as mem:
                timer = Timer(device).start()
                for _ in range(cfg["sweep_steps"]):
                    step(models[name])
                dt = timer.stop()
            if mem is not None:
                peaks[name] = max(peaks.get(name, 0), mem.peak_bytes)
            return bsz * L * cfg["sweep_steps"] / dt

        log(f"sweep: length {L}, batch {bsz}")
        runs = interleaved(alive, cfg["repeats"], measure, lambda *_: None)
        if cpu:  # allocation records, one untimed step each (RSS misses short peaks on CPU)
            with long_lived_frozen():
                for name in alive:
                    with TensorPeak() as mem:
                        step(models[name])
                    peaks[name] = mem.peak_bytes
        entry = {"batch": bsz, "systems": {}}
        for name in alive:
            entry["systems"][name] = {
                "tokens_per_s": summarize(runs[name]),
                "ratio": paired_ratios(runs[name], runs[STOCK]),
                "time_ratio": paired_ratios(runs[STOCK], runs[name]),
                "peak_mem_mb": peaks[name] / 2**20,
                "mem_ratio": peaks[name] / peaks[STOCK] if peaks[STOCK] else float("nan"),
                "paths": layer_paths(models[name].encoder, L),  # what the encoder's layers ran
            }
        if failed:
            entry["failed"] = failed
        out["lengths"][str(L)] = entry
    return out


