"""Side-by-side speed and memory benchmark: stock fairseq vs every plugin architecture.

Everything runs in ONE process with the systems interleaved (round r measures
every system once, in a rotated order), so machine drift hits them alike. Per
system, with the same sizes and the same batches:

* training throughput: target tokens per second over forward + backward +
  optimizer step (Adam; on fp16/bf16 the fairseq ``--fp16`` scheme: half
  weights, fp32 master copy, dynamic loss scale for fp16);
* peak memory of a training pass: this system's static state (weights, master
  copy, Adam moments) + the transient peak (CUDA max allocated, or the peak RSS
  growth sampled from /proc on CPU);
* inference: sentences per second with fairseq's SequenceGenerator (beam 4);
* ``--mode sweep``: the encoder alone, forward + backward, at sequence lengths
  32 ... 1024 with a fixed number of tokens per batch.

Ratios are to stock fairseq; each is the median over the rounds of the paired
per-round ratio (min and max are reported too, so noise is visible).
``--mode numerics`` is the fp16 check: every plugin architecture (tiny sizes)
runs forward + backward on padded batches; outputs and gradients must be
finite and the fused and explicit backends must agree.

The command-line front end is :mod:`fairseq_attn_plugins.cli.bench`.
"""

import argparse
import ctypes
import datetime
import fnmatch
import gc
import math
import os
import platform
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np
import torch

STOCK = "fairseq"
MODEL_NAME = "transformer_attn"

# ---------------------------------------------------------------------------
# Targets of issue 5 (training throughput ratio to stock fairseq). Matched by
# variant name (fnmatch patterns, first match wins); a variant with no match has
# no stated target and is reported as "n/a", never as a pass.
# ---------------------------------------------------------------------------
SPEED_TARGETS = [
    ("attn", 0.98),
    ("csan1d", 0.95), ("disan*", 0.95), ("bidirect", 0.95), ("drop*", 0.95),
    ("csan2d", 0.93), ("relpos*", 0.93), ("rel_pos*", 0.93),
    ("chain*", 0.80), ("conv*", 0.80),
]
MEMORY_TARGET = 1.10  # for systems whose attention stays on the fused path
WINDOWED = ["csan*"]  # should beat the dense baseline at length >= LONG
LONG = 512


def speed_target(variant: str) -> Optional[float]:
    for pattern, target in SPEED_TARGETS:
        if fnmatch.fnmatchcase(variant, pattern):
            return target
    return None


def is_windowed(variant: str) -> bool:
    return any(fnmatch.fnmatchcase(variant, p) for p in WINDOWED)


# ---------------------------------------------------------------------------
# Presets. tiny: CI smoke test; small: CPU; base/big: GPU (fairseq's own sizes).
# ---------------------------------------------------------------------------
PRESETS = {
    "tiny": dict(sizes=dict(embed=16, ffn=32, heads=4, layers=3), vocab=64, max_tokens=96,
                 n_batches=1, passes=1, repeats=2, gen_sents=2, gen_batch=2, max_len_b=2, max_src=12,
                 sweep_lengths=(8, 16), sweep_tokens=32, sweep_steps=1),
    "small": dict(sizes=dict(embed=256, ffn=1024, heads=4, layers=3), vocab=8000, max_tokens=1024,
                  n_batches=4, passes=1, repeats=3, gen_sents=16, gen_batch=16, max_len_b=10, max_src=64,
                  sweep_lengths=(32, 64, 128, 256, 512), sweep_tokens=2048, sweep_steps=2),
    "base": dict(sizes=None, big=False, vocab=32768, max_tokens=4096, n_batches=8, passes=2, repeats=5,
                 gen_sents=256, gen_batch=128, max_len_b=10, max_src=250,
                 sweep_lengths=(32, 64, 128, 256, 512, 1024), sweep_tokens=16384, sweep_steps=10),
    "big": dict(sizes=None, big=True, vocab=32768, max_tokens=4096, n_batches=8, passes=1, repeats=5,
                gen_sents=128, gen_batch=128, max_len_b=10, max_src=250,
                sweep_lengths=(32, 64, 128, 256, 512, 1024), sweep_tokens=16384, sweep_steps=10),
}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


# ---------------------------------------------------------------------------
# Systems: stock fairseq + every registered transformer_attn architecture
# ---------------------------------------------------------------------------
@dataclass
class System:
    name: str  # "fairseq" or the variant ("attn", "csan1d", ...)
    arch: str
    target: Optional[float]


def discover_systems(big: bool = False, patterns: Optional[List[str]] = None) -> List[System]:
    """Stock fairseq first, then every architecture registered for ``transformer_attn``."""
    import fairseq_attn_plugins  # noqa: F401  (registers the model and its architectures)
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    suffix = "_vaswani_wmt_en_de_big" if big else "_wmt_en_de"
    systems = [System(STOCK, "transformer" + suffix, None)]
    for arch, model in ARCH_MODEL_NAME_REGISTRY.items():
        if model != MODEL_NAME or not arch.startswith("transformer_") or not arch.endswith(suffix):
            continue
        variant = arch[len("transformer_"): -len(suffix)]
        if not big and variant.endswith("_vaswani"):
            continue
        systems.append(System(variant, arch, speed_target(variant)))
    if patterns:
        keep = [s for s in systems[1:] if any(fnmatch.fnmatchcase(s.name, p) for p in patterns)]
        if not keep:
            names = [s.name for s in systems[1:]]
            raise ValueError(f"--systems {patterns} matches none of the registered variants {names}")
        systems = systems[:1] + keep
    return systems


class _FakeTask:
    def __init__(self, dictionary):
        self.source_dictionary = dictionary
        self.target_dictionary = dictionary


def make_dictionary(n_symbols: int):
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(n_symbols - d.nspecial):
        d.add_symbol(f"w{i}")
    d.finalize(padding_factor=8)
    return d


def build_model(arch: str, dictionary, sizes: Optional[dict], seed: int, **extra):
    """Build ``arch`` without the CLI. Same seed -> same initial weights."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    extra.setdefault("max_source_positions", 1024)
    extra.setdefault("max_target_positions", extra["max_source_positions"])
    args = argparse.Namespace(share_all_embeddings=True, **extra)
    if sizes:
        for side in ("encoder", "decoder"):
            setattr(args, f"{side}_embed_dim", sizes["embed"])
            setattr(args, f"{side}_ffn_embed_dim", sizes["ffn"])
            setattr(args, f"{side}_attention_heads", sizes["heads"])
            setattr(args, f"{side}_layers", sizes["layers"])
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(seed)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, _FakeTask(dictionary))


def attention_paths(model) -> Dict[str, int]:
    """How many self-attention modules run fused / explicit (training, no weights)."""
    from fairseq_attn_plugins.attention import PluginSelfAttention

    counts = {"fused": 0, "explicit": 0}
    for m in model.modules():
        if isinstance(m, PluginSelfAttention):
            counts["fused" if m.uses_fused_path(False) else "explicit"] += 1
    return counts


# ---------------------------------------------------------------------------
# Data: WMT-like lengths, fairseq-style batching (max tokens, multiple of 8)
# ---------------------------------------------------------------------------
def wmt_lengths(n: int, rng: np.random.Generator, max_len: int):
    """Source/target lengths in BPE tokens (+ EOS) shaped like WMT14 en-de.

    Log-normal, median ~25 and mean ~30 tokens, long tail, cut at ``max_len``;
    the target is the source length times a log-normal ratio.
    """
    src = np.exp(rng.normal(3.2, 0.6, n))
    tgt = src * np.exp(rng.normal(0.05, 0.15, n))
    clip = lambda a: np.clip(np.rint(a), 1, max_len - 1).astype(int) + 1  # noqa: E731 (+ EOS)
    return clip(src), clip(tgt)


def _collate(pairs, d, device):
    pad, eos = d.pad(), d.eos()
    B = len(pairs)
    S = max(len(s) for s, _ in pairs)
    T = max(len(t) for _, t in pairs)
    src = torch.full((B, S), pad, dtype=torch.long)
    tgt = torch.full((B, T), pad, dtype=torch.long)
    prev = torch.full((B, T), pad, dtype=torch.long)
    for i, (s, t) in enumerate(pairs):
        src[i, S - len(s):] = torch.as_tensor(s)  # left-padded source (fairseq default)
        tgt[i, : len(t)] = torch.as_tensor(t)
        prev[i, 0] = eos
        prev[i, 1: len(t)] = torch.as_tensor(t[:-1])
    lengths = torch.as_tensor([len(s) for s, _ in pairs])
    return {
        "net_input": {"src_tokens": src.to(device), "src_lengths": lengths.to(device),
                      "prev_output_tokens": prev.to(device)},
        "target": tgt.to(device),
        "ntokens": int(sum(len(t) for _, t in pairs)),
        "nsentences": B,
    }


def _sentence(length, d, rng):
    toks = rng.integers(d.nspecial, len(d), size=length).tolist()
    toks[-1] = d.eos()
    return toks


def make_train_batches(d, max_tokens, n_batches, max_len, seed, device):
    """Identical batches for every system: like fairseq's batch_by_size on sorted lengths."""
    rng = np.random.default_rng(seed)
    n = max(64, n_batches * max_tokens // 20)
    src_len, tgt_len = wmt_lengths(n, rng, max_len)
    order = np.lexsort((tgt_len, src_len))
    batches, cur, cur_max = [], [], 0
    for i in order:
        width = max(src_len[i], tgt_len[i], cur_max)
        if cur and width * (len(cur) + 1) > max_tokens:
            keep = max(8, len(cur) // 8 * 8) if len(cur) >= 8 else len(cur)
            batches.append(cur[:keep])
            cur = cur[keep:]
            cur_max = max([max(src_len[j], tgt_len[j]) for j in cur], default=0)
            width = max(src_len[i], tgt_len[i], cur_max)
        cur.append(i)
        cur_max = width
    if cur:
        batches.append(cur)
    picks = rng.permutation(len(batches))[:n_batches]
    out = []
    for b in picks:
        pairs = [(_sentence(src_len[i], d, rng), _sentence(tgt_len[i], d, rng)) for i in batches[b]]
        out.append(_collate(pairs, d, device))
    return out


def make_gen_batches(d, n_sents, batch_size, max_len, seed, device):
    rng = np.random.default_rng(seed + 1)
    src_len, _ = wmt_lengths(n_sents, rng, max_len)
    src_len = np.sort(src_len)
    out = []
    for i in range(0, n_sents, batch_size):
        pairs = [(_sentence(n, d, rng), [d.eos()]) for n in src_len[i: i + batch_size]]
        b = _collate(pairs, d, device)
        b["net_input"].pop("prev_output_tokens")
        out.append(b)
    return out


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


def train_step(model, opt: MasterAdam, batch, label_smoothing=0.1):
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

    net_output = model(**batch["net_input"])
    lprobs = model.get_normalized_probs(net_output, log_probs=True)
    target = batch["target"]
    loss, _ = label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1),
                                      label_smoothing, ignore_index=model.decoder.padding_idx)
    (loss * opt.scale).backward()
    opt.step()


# ---------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------
def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PeakMemory:
    """Transient peak memory of a block: CUDA max allocated, or sampled RSS on CPU."""

    def __init__(self, device):
        self.device = device
        self.peak_bytes = 0

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.before = torch.cuda.memory_allocated(self.device)
        else:
            gc.collect()
            _malloc_trim()
            self.before = _rss()
            self._peak = self.before
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self._peak = max(self._peak, _rss())
            time.sleep(0.002)

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device) - self.before
        else:
            self._stop.set()
            self._thread.join()
            self._peak = max(self._peak, _rss())
            self.peak_bytes = self._peak - self.before
        return False


def _rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: ru_maxrss cannot show per-system growth
        return 0


def _malloc_trim():
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _summary(values: List[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": list(values)}


def _ratios(sys_runs: List[float], ref_runs: List[float]) -> dict:
    """Paired per-round ratios to stock fairseq and their median/min/max."""
    r = [a / b for a, b in zip(sys_runs, ref_runs)]
    return _summary(r)


def interleaved(systems: List[str], repeats: int, measure, log=print) -> Dict[str, List]:
    """Round r measures every system once, the order rotated by r."""
    runs = {s: [] for s in systems}
    for r in range(repeats):
        order = systems[r % len(systems):] + systems[: r % len(systems)]
        for s in order:
            runs[s].append(measure(s, r))
        log(f"  round {r + 1}/{repeats} done")
    return runs


def _status(ratio: dict, target: Optional[float], higher_is_better=True) -> str:
    if target is None:
        return "n/a"
    ok = ratio["median"] >= target if higher_is_better else ratio["median"] <= target
    status = "PASS" if ok else "MISS"
    if ratio["min"] <= target <= ratio["max"]:
        status += " (within noise)"
    return status


# ---------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------
def run_benchmark(device="cpu", preset=None, dtype=None, mode="train", systems=None,
                  repeats=None, seed=1, infer=True, log=print) -> dict:
    device = torch.device(device)
    preset = preset or ("small" if device.type == "cpu" else "base")
    dtype = dtype or ("fp32" if device.type == "cpu" else "fp16")
    cfg = dict(PRESETS[preset])
    if repeats:
        cfg["repeats"] = repeats
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    report = {"meta": meta(device, preset, dtype, mode, cfg)}
    sys_list = discover_systems(cfg.get("big", False), systems)
    dictionary = make_dictionary(cfg["vocab"])
    models, entries = _build_all(sys_list, dictionary, cfg, seed, device, dtype,
                                 max(256, cfg["max_src"] + 1) if mode != "sweep" else
                                 max(256, max(cfg["sweep_lengths"])), log)
    report["systems"] = entries
    log(f"systems: {', '.join(models)} | preset {preset}, {dtype} on {device}")
    if mode in ("train", "all"):
        report["train"] = bench_train(models, dictionary, cfg, device, seed, log)
        if infer:
            report["infer"] = bench_infer(models, dictionary, cfg, device, seed, log)
    if mode == "all":  # rebuild with position tables long enough for the sweep
        del models
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        models, sweep_entries = _build_all(sys_list, dictionary, cfg, seed, device, dtype,
                                           max(256, max(cfg["sweep_lengths"])), log)
    if mode in ("sweep", "all"):
        report["sweep"] = bench_sweep(models, cfg, device, seed, log)
        if mode == "all":
            report["sweep"]["build_errors"] = {e["name"]: e["error"] for e in sweep_entries
                                               if "error" in e}
    targets = {s["name"]: s["target"] for s in report["systems"]}
    report["verdicts"] = verdicts(report, targets)
    return report


def _build_all(sys_list, dictionary, cfg, seed, device, dtype, max_positions, log):
    """Build every system (a broken variant is reported, the others still run)."""
    models, entries = {}, []
    for s in sys_list:
        entry = {"name": s.name, "arch": s.arch, "target": s.target}
        try:
            m = build_model(s.arch, dictionary, cfg["sizes"], seed, max_source_positions=max_positions,
                            max_target_positions=max_positions)
            m = m.to(device=device, dtype=DTYPES[dtype])
            entry["params"] = sum(p.numel() for p in m.parameters())
            entry["param_tensors"] = sum(1 for _ in m.parameters())
            entry["attention_paths"] = attention_paths(m)
            models[s.name] = m
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
            log(f"! {s.name}: cannot build (max positions {max_positions}): {entry['error']}")
        entries.append(entry)
    if STOCK not in models:
        raise RuntimeError(f"stock fairseq model failed to build: {entries[0].get('error')}")
    return models, entries


def bench_train(models, d, cfg, device, seed, log):
    batches = make_train_batches(d, cfg["max_tokens"], cfg["n_batches"], cfg["max_src"], seed, device)
    ntokens = sum(b["ntokens"] for b in batches)
    log(f"train: {len(batches)} batches, {ntokens} target tokens, "
        f"{sum(b['nsentences'] for b in batches)} sentences per pass")
    opts = {}
    for name, m in models.items():  # warm-up pass (allocator, kernels, Adam state)
        m.train()
        opts[name] = MasterAdam(m.parameters())
        for b in batches:
            train_step(m, opts[name], b)
    _sync(device)
    peaks = {name: 0 for name in models}

    def measure(name, r):
        m, opt = models[name], opts[name]
        with PeakMemory(device) as mem:
            t0 = time.perf_counter()
            for _ in range(cfg["passes"]):
                for b in batches:
                    train_step(m, opt, b)
            _sync(device)
            dt = time.perf_counter() - t0
        peaks[name] = max(peaks[name], mem.peak_bytes)
        return ntokens * cfg["passes"] / dt

    runs = interleaved(list(models), cfg["repeats"], measure, log)
    out = {"batches": len(batches), "tokens_per_pass": ntokens, "passes": cfg["passes"],
           "repeats": cfg["repeats"], "systems": {}}
    ref = runs[STOCK]
    for name in models:
        static = opts[name].state_bytes()
        out["systems"][name] = {
            "tokens_per_s": _summary(runs[name]),
            "ratio": _ratios(runs[name], ref),
            "peak_mem_mb": (static + peaks[name]) / 2**20,
            "static_mem_mb": static / 2**20,
            "skipped_steps": opts[name].skipped,
        }
    ref_mem = out["systems"][STOCK]["peak_mem_mb"]
    for name in models:
        e = out["systems"][name]
        e["mem_ratio"] = e["peak_mem_mb"] / ref_mem if ref_mem > 0 else float("nan")
    return out


def bench_infer(models, d, cfg, device, seed, log):
    from fairseq.sequence_generator import SequenceGenerator

    batches = make_gen_batches(d, cfg["gen_sents"], cfg["gen_batch"], cfg["max_src"], seed, device)
    nsent = sum(b["nsentences"] for b in batches)
    # Untrained (or barely trained) models emit EOS at once. To decode a WMT-like and
    # identical number of steps in every system, each batch's generator forces the
    # output length to the batch's longest source: match_source_len caps it there and
    # min_len forbids an earlier EOS.
    gens = {name: [SequenceGenerator([m], d, beam_size=4, match_source_len=True,
                                     min_len=int(b["net_input"]["src_lengths"].max()))
                   for b in batches]
            for name, m in models.items()}
    out_len = {}

    def generate(name):
        total = 0
        with torch.no_grad():
            for gen, b in zip(gens[name], batches):
                hyps = gen.generate([models[name]], b)
                total += sum(len(h[0]["tokens"]) for h in hyps)
        out_len[name] = total / nsent

    for name, m in models.items():
        m.eval()
        generate(name)  # warm-up
    _sync(device)

    def measure(name, r):
        t0 = time.perf_counter()
        generate(name)
        _sync(device)
        return nsent / (time.perf_counter() - t0)

    log(f"inference: {nsent} sentences, beam 4")
    runs = interleaved(list(models), max(2, cfg["repeats"] // 2 + 1), measure, log)
    out = {"sentences": nsent, "beam": 4, "systems": {}}
    for name in models:
        out["systems"][name] = {"sentences_per_s": _summary(runs[name]),
                                "ratio": _ratios(runs[name], runs[STOCK]),
                                "mean_output_len": out_len[name]}
    for m in models.values():
        m.train()
    return out


def bench_sweep(models, cfg, device, seed, log):
    """Encoder alone, forward + backward, fixed tokens per batch, no padding."""
    g = torch.Generator().manual_seed(seed + 2)
    out = {"tokens_per_batch": cfg["sweep_tokens"], "steps": cfg["sweep_steps"], "lengths": {}}
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
        alive = [n for n in models if n not in failed]
        if STOCK not in alive:
            out["lengths"][str(L)] = {"failed": failed}
            continue
        _sync(device)

        def measure(name, r):
            with PeakMemory(device) as mem:
                t0 = time.perf_counter()
                for _ in range(cfg["sweep_steps"]):
                    step(models[name])
                _sync(device)
                dt = time.perf_counter() - t0
            peaks[name] = max(peaks.get(name, 0), mem.peak_bytes)
            return bsz * L * cfg["sweep_steps"] / dt

        log(f"sweep: length {L}, batch {bsz}")
        runs = interleaved(alive, max(2, cfg["repeats"] // 2 + 1), measure, lambda *_: None)
        entry = {"batch": bsz, "systems": {}}
        for name in alive:
            entry["systems"][name] = {
                "tokens_per_s": _summary(runs[name]),
                "ratio": _ratios(runs[name], runs[STOCK]),
                "peak_mem_mb": peaks[name] / 2**20,
                "mem_ratio": peaks[name] / peaks[STOCK] if peaks[STOCK] else float("nan"),
            }
        if failed:
            entry["failed"] = failed
        out["lengths"][str(L)] = entry
    return out


def verdicts(report, targets) -> dict:
    """PASS / MISS per system and target, '(within noise)' where the target lies
    between the smallest and largest per-round ratio."""
    v = {}
    paths = {s["name"]: s.get("attention_paths") for s in report["systems"]}
    train = report.get("train", {}).get("systems", {})
    for name, e in train.items():
        if name == STOCK:
            continue
        item = {"speed_target": targets.get(name), "speed": _status(e["ratio"], targets.get(name))}
        fused = paths.get(name) and paths[name]["explicit"] == 0
        item["memory_target"] = MEMORY_TARGET if fused else None
        item["memory"] = ("n/a" if not fused else
                          ("PASS" if e["mem_ratio"] <= MEMORY_TARGET else "MISS"))
        v[name] = item
    sweep = report.get("sweep", {}).get("lengths", {})
    for L, entry in sweep.items():
        if int(L) < LONG:
            continue
        for name, e in entry.get("systems", {}).items():
            if name == STOCK or not is_windowed(name):
                continue
            v.setdefault(name, {})[f"long_{L}"] = _status(e["ratio"], 1.0)
    return v


def meta(device, preset, dtype, mode, cfg) -> dict:
    import fairseq

    m = {"date": datetime.date.today().isoformat(), "device": str(device), "preset": preset,
         "dtype": dtype, "mode": mode, "torch": torch.__version__, "fairseq": fairseq.__version__,
         "python": platform.python_version(), "machine": platform.machine(),
         "cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
         "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()}}
    if device.type == "cuda":
        m["gpu"] = torch.cuda.get_device_name(device)
        m["cuda"] = torch.version.cuda
    return m


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
    out = {"device": str(device), "dtype": dtype, "tolerance": tol, "archs": {}}

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
            for backend, dt in (("explicit", "fp32"), ("auto", dtype), ("explicit", dtype)):
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
        except Exception as e:
            entry = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        out["archs"][s.arch] = entry
        log(f"numerics {s.arch}: {'OK' if entry['ok'] else 'FAIL'} {entry}")
    out["ok"] = all(e["ok"] for e in out["archs"].values())
    return out


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------
def _fmt(x, nd=2):
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def render(report: dict) -> str:
    """Markdown tables of absolute figures, ratios to stock fairseq and verdicts."""
    m = report["meta"]
    lines = [f"### {m['preset']} preset, {m['dtype']} on {m.get('gpu', m['device'])} "
             f"(torch {m['torch']}, fairseq {m['fairseq']}, {m['date']})", ""]
    errs = [s for s in report["systems"] if "error" in s]
    for s in errs:
        lines.append(f"- **{s['name']}** could not be built: {s['error']}")
    v = report.get("verdicts", {})
    tr, inf = report.get("train"), report.get("infer")
    if tr:
        lines += [f"Training: {tr['batches']} batches, {tr['tokens_per_pass']} target tokens per pass, "
                  f"{tr['passes']} pass(es) per measurement, {tr['repeats']} interleaved rounds; ratio = median of per-round ratios "
                  f"to stock fairseq [min-max].", ""]
        head = "| system | train tok/s | ratio [min-max] | target | speed | peak MB | mem ratio | mem |"
        sep = "|---|---:|---|---:|---|---:|---:|---|"
        if inf:
            head += " infer sent/s | infer ratio |"
            sep += "---:|---:|"
        lines += [head, sep]
        for name, e in tr["systems"].items():
            r = e["ratio"]
            vv = v.get(name, {})
            row = (f"| {name} | {e['tokens_per_s']['median']:.0f} | "
                   f"{r['median']:.3f} [{r['min']:.3f}-{r['max']:.3f}] | "
                   f"{_fmt(vv.get('speed_target'))} | {vv.get('speed', 'reference')} | "
                   f"{e['peak_mem_mb']:.0f} | {e['mem_ratio']:.3f} | {vv.get('memory', 'reference')} |")
            if inf:
                ie = inf["systems"][name]
                row += f" {ie['sentences_per_s']['median']:.1f} | {ie['ratio']['median']:.3f} |"
            lines.append(row)
        lines.append("")
    sw = report.get("sweep")
    if sw:
        lengths = list(sw["lengths"])
        names = []
        for e in sw["lengths"].values():
            names += [n for n in e.get("systems", {}) if n not in names]
        lines += [f"Encoder-only length sweep (forward + backward, {sw['tokens_per_batch']} tokens "
                  f"per batch): throughput ratio to stock fairseq (median) / activation memory ratio.",
                  "", "| system | " + " | ".join(f"L={L}" for L in lengths) + " |",
                  "|---|" + "---|" * len(lengths)]
        for name in names:
            cells = []
            for L in lengths:
                e = sw["lengths"][L].get("systems", {}).get(name)
                f = sw["lengths"][L].get("failed", {}).get(name)
                cells.append(f"{e['ratio']['median']:.2f} / {e['mem_ratio']:.2f}" if e else
                             ("OOM" if f else "-"))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        ref_row = [f"{sw['lengths'][L]['systems'][STOCK]['tokens_per_s']['median']:.0f}"
                   if STOCK in sw["lengths"][L].get("systems", {}) else "-" for L in lengths]
        lines.append(f"| (stock tok/s) | " + " | ".join(ref_row) + " |")
        for name, err in sw.get("build_errors", {}).items():
            lines.append(f"- **{name}** could not be built for the sweep: {err}")
        long_v = [f"{n} L={k[5:]}: {s}" for n, vv in v.items() for k, s in vv.items()
                  if k.startswith("long_")]
        if long_v:
            lines += ["", f"Windowed variants faster than dense stock at L >= {LONG}: "
                      + "; ".join(long_v)]
        lines.append("")
    return "\n".join(lines)


def render_numerics(num: dict) -> str:
    lines = [f"fp16 numerics ({num['dtype']} on {num['device']}, tolerance {num['tolerance']}): "
             f"{'all OK' if num['ok'] else 'FAILURES'}", "",
             "| arch | finite | fused vs explicit out / grad | fused vs fp32 out / grad | "
             "explicit vs fp32 out / grad | ok |", "|---|---|---|---|---|---|"]
    for arch, e in num["archs"].items():
        if "error" in e:
            lines.append(f"| {arch} | error: {e['error']} | | | | FAIL |")
            continue
        lines.append(
            f"| {arch} | {e['finite']} | {e['fused_vs_explicit_out']:.1e} / {e['fused_vs_explicit_grad']:.1e} | "
            f"{e['fused_vs_fp32_out']:.1e} / {e['fused_vs_fp32_grad']:.1e} | "
            f"{e['explicit_vs_fp32_out']:.1e} / {e['explicit_vs_fp32_grad']:.1e} | "
            f"{'OK' if e['ok'] else 'FAIL'} |")
    return "\n".join(lines) + "\n"
