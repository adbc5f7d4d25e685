"""Side-by-side speed and memory benchmark: stock fairseq vs every plugin architecture.

Everything runs in ONE process with the systems interleaved (round r measures every
system once, in a rotated order), so machine drift hits them alike. Modules by concern:

* :mod:`.systems`: the systems (stock + every ``transformer_attn`` architecture), presets,
  targets; :mod:`.data`: identical WMT-like batches for all;
* :mod:`.timing`: CUDA-event timers (perf_counter on CPU), peak memory, interleaved rounds,
  the per-round **spread** of every ratio and the +-3 % "unmeasured" rule;
* :mod:`.train`: training throughput (tokens/s over forward + backward + Adam, fairseq's
  fp16 scheme, ``update_freq`` gradient accumulation) and peak memory, plus the stock
  base-vs-big check (``--mode scaling``: time ratio next to the FLOP ratio);
* :mod:`.infer`: beam-4 SequenceGenerator sentences/s; :mod:`.sweep`: the encoder alone
  at lengths 32 ... 1024; :mod:`.numerics`: fp16 check, fused/flex == explicit;
* :mod:`.tune`: ``--tune``, the cache of ``--attn-backend tuned`` filled ahead of training;
* :mod:`.report`: PASS / MISS / unmeasured verdicts and Markdown; :mod:`.run`: the driver.

The command-line front end is :mod:`fairseq_attn_plugins.cli.bench` (``fairseq-attn-bench``).
"""

from .data import make_gen_batches, make_train_batches, wmt_lengths
from .infer import bench_infer
from .numerics import NUMERICS_SIZES, run_numerics
from .report import meta, render, render_numerics, render_scaling, verdicts
from ..bench_presets import MODES
from .run import run_benchmark, run_scaling
from .sweep import bench_sweep
from .systems import (DTYPES, FAIRSEQ_SIZES, POSITION_METHODS, position_sweep_systems, LONG, LONG_TARGETS, MEMORY_TARGET, MEMORY_TARGETS,
                      PRESETS, SPEED_TARGETS, STOCK, WINDOWED, System, attention_paths,
                      build_model, discover_systems, is_windowed, make_dictionary, memory_target,
                      scaling_sizes, speed_target)
from .timing import (MAX_SPREAD, PeakMemory, TensorPeak, Timer, paired_ratios, target_status, summarize, fmt_ratio,
                     interleaved, is_measured, spread)
from .train import MasterAdam, bench_scaling, bench_train, run_pass, train_flops, train_step
from .tune import TUNE_LENGTHS, tune

__all__ = [
    "DTYPES",
    "FAIRSEQ_SIZES",
    "LONG",
    "LONG_TARGETS",
    "MAX_SPREAD",
    "MEMORY_TARGET",
    "MEMORY_TARGETS",
    "MODES",
    "MasterAdam",
    "NUMERICS_SIZES",
    "PRESETS",
    "PeakMemory",
    "SPEED_TARGETS",
    "STOCK",
    "System",
    "TUNE_LENGTHS",
    "TensorPeak",
    "Timer",
    "WINDOWED",
    "attention_paths",
    "bench_infer",
    "bench_scaling",
    "bench_sweep",
    "bench_train",
    "build_model",
    "discover_systems",
    "fmt_ratio",
    "interleaved",
    "is_measured",
    "is_windowed",
    "make_dictionary",
    "make_gen_batches",
    "make_train_batches",
    "memory_target",
    "meta",
    "paired_ratios",
    "render",
    "render_numerics",
    "render_scaling",
    "run_benchmark",
    "run_numerics",
    "run_pass",
    "run_scaling",
    "scaling_sizes",
    "speed_target",
    "spread",
    "summarize",
    "target_status",
    "train_flops",
    "train_step",
    "tune",
    "verdicts",
    "wmt_lengths",
]
