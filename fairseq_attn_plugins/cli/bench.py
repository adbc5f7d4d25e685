"""fairseq-attn-bench: speed and memory of every attention variant next to stock fairseq.

Examples::

    fairseq-attn-bench                                   # small model on CPU (a few minutes)
    fairseq-attn-bench --device cuda --preset base --dtype fp16 --json base.json
    fairseq-attn-bench --device cuda --preset base --mode sweep   # encoder, lengths 32..1024
    fairseq-attn-bench --device cuda --mode numerics              # fp16 finite + fused==explicit

    fairseq-attn-bench --device cuda --preset base --mode scaling  # stock base vs big: time vs FLOP ratio
    fairseq-attn-bench --device cuda --tune --systems t5bias      # --attn-backend tuned's cache, ahead of training
    fairseq-attn-bench --preset bible --data-bin DATA --threads 1 --systems 'transformer_attn_*,transformer_csan*' --no-infer

See docs/explanation/benchmark.md. The code is in :mod:`fairseq_attn_plugins.bench`.
"""

import argparse
import json
import math
import os
import sys

from fairseq_attn_records.command_line import Parser
from fairseq_attn_records.output_files import write_text

from .. import registration
from ..bench_presets import DTYPE_NAMES, MODES, PRESETS


def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {text})")
    return value


def build_parser():
    p = Parser(
        prog="fairseq-attn-bench",
        description="Training throughput, peak memory and beam-4 inference speed of stock fairseq "
                    "and every registered transformer_attn architecture, measured interleaved in "
                    "one process; ratios to stock fairseq with each variant's target.")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="model and batch sizes: tiny (smoke test), small (CPU), bible (the bible "
                        "recipe's CPU model: 3+3 layers, dim 128, 2048-token batches), base / big "
                        "(fairseq's Transformer-base/big, 4096-token batches; GPU). "
                        "Default: small on cpu, base on cuda")
    p.add_argument("--data-bin", metavar="DIR",
                   help="a fairseq-preprocess data-bin: the models take its dictionaries and the "
                        "batches its training pairs' lengths (default: the preset's vocabularies, "
                        "WMT-like lengths)")
    p.add_argument("--dtype", choices=sorted(DTYPE_NAMES),
                   help="default fp32 on cpu, fp16 on cuda")
    p.add_argument("--mode", choices=[*MODES, "numerics"], default="train",
                   help="train: training + inference (default); sweep: encoder alone over "
                        "sequence lengths; all: both; scaling: stock base vs big, measured time "
                        "ratio next to the FLOP ratio; numerics: fp16 check of every architecture")
    p.add_argument("--sweep", choices=["lengths"],
                   help="lengths: the position-method length sweep (encoder forward + backward at "
                        "L = 32 ... 1024, tokens per batch fixed): stock, relpos k/kv, rope, alibi, "
                        "t5bias, csan1d/2d on each path that trains on the device (CPU: explicit, "
                        "fused, relpos k/kv's auto = the region split from 256 positions, t5bias's and "
                        "alibi's auto = the distance-bias path from 128; CUDA: auto too, flex_attention "
                        "where it picks it), time and memory ratios to stock")
    p.add_argument("--lengths", type=_lengths, metavar="L1,L2,...",
                   help="with --sweep lengths: the lengths to measure, positive integers in "
                        "increasing order (default 32,64,128,256,512,1024); with --tune: the "
                        "lengths to tune (default 16,32,64,128,256)")
    p.add_argument("--tune", action="store_true",
                   help="fill this machine's cache of --attn-backend tuned ahead of training: each "
                        "system (--systems; default every architecture) built with --attn-backend tuned "
                        "on --device in --dtype times the paths of every shape class it meets at "
                        "--lengths (a training step and an inference pass each) and writes the fastest "
                        "to the cache file (folder: FAIRSEQ_ATTN_CACHE_DIR, default ~/.cache/fairseq_attn); "
                        "default preset tiny on cpu, base on cuda")
    p.add_argument("--systems", type=str,
                   help="comma list of variant names, architectures or patterns to run besides stock "
                        "fairseq, e.g. attn,csan1d or transformer_csan*_wmt_en_de (default: every "
                        "registered architecture)")
    p.add_argument("--distance-devices", type=_devices, action="append", metavar="DEV[,DEV]",
                   help="build every layer with a policy that takes the distance kernels "
                        "(region split, query blocks, distance bias) on exactly this comma list "
                        "of cpu / cuda, for every call (cpu: none on CUDA); given more than once, "
                        "every system runs under each in the same interleaved rounds (the first "
                        "keeps its name, the others are NAME@cpu+cuda; one whose layers take the "
                        "same paths at every measured shape is measured once). Default: the "
                        "layers' own policy (distance kernels on cpu, and on cuda for training "
                        "relpos kv/tied and t5bias from 512 positions)")
    p.add_argument("--repeats", type=_positive, help="interleaved rounds of every measurement: training, inference, the length sweep (default from preset)")
    p.add_argument("--no-infer", action="store_true", help="skip the inference measurement")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=_positive, help="CPU threads for torch (default: torch's)")
    p.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the tables as Markdown")
    return p


def _lengths(text):
    """``--lengths``: positive integers, comma-separated, increasing."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1 or values != sorted(set(values)):
        raise argparse.ArgumentTypeError(f"expected positive integers in increasing order, "
                                         f"e.g. 256,512,1024 (got {text!r})")
    return values


def _devices(text):
    """``--distance-devices``: a comma list of cpu / cuda, each once."""
    values = tuple(x.strip() for x in text.split(","))
    if not values or not set(values) <= {"cpu", "cuda"} or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cpu,cuda (got {text!r})")
    return values


def _write_atomic(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    write_text(path, text)


def _clean(obj):
    """JSON has no NaN/inf: write them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.device == "cpu" and args.dtype == "fp16":
        raise SystemExit("fairseq-attn-bench: --dtype fp16 needs --device cuda (use fp32 or bf16 on cpu)")
    registration.register()
    import torch

    from .. import bench as B

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("fairseq-attn-bench: --device cuda but torch sees no CUDA device")
    if args.threads:
        torch.set_num_threads(args.threads)
    patterns = [s.strip() for s in args.systems.split(",") if s.strip()] if args.systems else None
    log = lambda *a: print(*a, flush=True)  # noqa: E731

    if args.tune:
        mixed = [f for f, v in (("--sweep", args.sweep), ("--distance-devices", args.distance_devices),
                                ("--data-bin", args.data_bin),
                                ("--markdown", args.markdown), ("--no-infer", args.no_infer),
                                ("--repeats", args.repeats)) if v] + (
            [f"--mode {args.mode}"] if args.mode != "train" else [])
        if mixed:
            raise SystemExit(f"fairseq-attn-bench: --tune fills the tuned paths' cache; drop {', '.join(mixed)}")
        try:
            report = B.tune(args.device, args.dtype, args.preset, patterns, args.lengths or B.TUNE_LENGTHS,
                            args.seed, log)
        except ValueError as e:
            raise SystemExit(f"fairseq-attn-bench: {e}")
        if args.json:
            _write_atomic(args.json, json.dumps(report, indent=1) + "\n")
        return 0
    if args.lengths and not args.sweep:
        raise SystemExit("fairseq-attn-bench: --lengths belongs to --sweep lengths or --tune")
    if args.sweep and args.mode not in ("train", "sweep"):
        raise SystemExit(f"fairseq-attn-bench: --sweep {args.sweep} is a sweep; drop --mode {args.mode}")
    if args.distance_devices and args.mode in ("numerics", "scaling"):
        raise SystemExit(f"fairseq-attn-bench: --distance-devices belongs to the train and sweep "
                         f"modes; drop it or --mode {args.mode}")
    if args.data_bin and args.mode in ("numerics", "scaling"):
        raise SystemExit(f"fairseq-attn-bench: --data-bin belongs to the train and sweep modes; drop it or "
                         f"--mode {args.mode}")
    if args.mode == "numerics":
        try:
            report = B.run_numerics(args.device,
                                    args.dtype or ("fp16" if args.device == "cuda" else "fp32"),
                                    systems=patterns, log=log)
        except ValueError as e:
            raise SystemExit(f"fairseq-attn-bench: {e}")
        text = B.render_numerics(report)
        status = 0 if report["ok"] else 1
    else:
        try:
            report = B.run_benchmark(args.device, args.preset, args.dtype, args.mode, patterns,
                                     args.repeats, args.seed, not args.no_infer, log,
                                     sweep=args.sweep, lengths=args.lengths,
                                     distance_devices=args.distance_devices, data_bin=args.data_bin)
        except ValueError as e:
            raise SystemExit(f"fairseq-attn-bench: {e}")
        text = B.render(report)
        status = 0
    print()
    print(text)
    if args.json:
        _write_atomic(args.json, json.dumps(_clean(report), indent=1) + "\n")
    if args.markdown:
        _write_atomic(args.markdown, text)
    return status


if __name__ == "__main__":
    sys.exit(main())
