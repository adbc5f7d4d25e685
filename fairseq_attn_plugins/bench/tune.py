"""``fairseq-attn-bench --tune``: fill this machine's cache of ``--attn-backend tuned`` ahead of
training (:mod:`fairseq_attn_core.backends.tuning`).

Each system is built with ``--attn-backend tuned`` on the device and in the dtype given, then
runs, at each length (every sentence that long, as many as the preset's tokens per batch
allow), one training step's forward and backward (the encoder's and the decoder's training
classes) and one forward without gradients (their inference classes, teacher-forced): each
shape class met is timed once and written to the cache file, which every later run on this
machine reads. A class a training meets that the tuning did not (another length bucket, attention
dropout, incremental decoding) is timed at its first call there.
"""

from typing import Dict, List, Optional, Sequence

import torch

from .systems import DTYPES, PRESETS, build_model, discover_systems, make_dictionary

#: the lengths tuned by default: the buckets of WMT sentences
TUNE_LENGTHS = (16, 32, 64, 128, 256)


def tune(device="cpu", dtype=None, preset=None, systems: Optional[List[str]] = None,
         lengths: Sequence[int] = TUNE_LENGTHS, seed: int = 1, log=print) -> Dict:
    """system -> shape class -> {"path", "source"} (``"timed"`` now, ``"cache"`` if known before)."""
    from fairseq_attn_core import SelfAttention
    from fairseq_attn_core.backends import tuning

    device = torch.device(device)
    preset = preset or ("tiny" if device.type == "cpu" else "base")
    dtype = dtype or ("fp32" if device.type == "cpu" else "fp16")
    cfg = PRESETS[preset]
    dictionary = make_dictionary(cfg["vocab"])
    g = torch.Generator().manual_seed(seed)
    report = {}
    for s in discover_systems(cfg.get("big", False), systems)[1:]:  # stock fairseq: no plugin layer
        model = build_model(s.arch, dictionary, cfg["sizes"], seed, max_source_positions=max(lengths) + 2,
                            attn_backend="tuned", **s.flags).to(device=device, dtype=DTYPES[dtype])
        for L in lengths:
            B = max(1, cfg["max_tokens"] // L)
            src, prev = (torch.randint(dictionary.nspecial, len(dictionary), (B, L), generator=g).to(device)
                         for _ in range(2))
            src_lengths = torch.full((B,), L, device=device)
            model.train()
            out, _ = model(src, src_lengths, prev)
            out.float().sum().backward()
            model.zero_grad(set_to_none=True)
            model.eval()
            with torch.no_grad():
                model(src, src_lengths, prev)
        choices = {}
        for m in model.modules():
            if isinstance(m, SelfAttention):
                for cls, (path, source) in m.tuned_choices.items():  # timed by one layer, read by the others
                    if choices.get(cls, {}).get("source") != "timed":
                        choices[cls] = {"path": path, "source": source}
        report[s.name] = choices
        log(f"{s.name}: " + "; ".join(f"{c} -> {v['path']} ({v['source']})" for c, v in sorted(choices.items())))
        del model
    log(f"cache: {tuning.cache_file(tuning.machine_key(device))}")
    return report
