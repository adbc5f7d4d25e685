#!/usr/bin/env bash
# The one prepared device run: every GPU check of the attention paths, in one call of the device
# tool (one H100 / H200, at most 10 minutes; each step has its own limit and writes its log, and
# its JSON, to $OUT, so what ran comes back even if a later step is cut off). Ordered by value:
#   0. numerics of the new CUDA kernels: the distance kernels' per-device table (region split,
#      query blocks, distance bias: torch's memory-efficient kernel with the log-sum-exp) in
#      fp16 and bf16 against float64 references, the compiled flex kernels against the explicit
#      path (fp16, pytest), and the whole models of the position methods and CSAN in fp16 and
#      bf16 (fused / flex against explicit, --mode numerics);
#   1. flex training settled: graphs compiled over 11 batch shapes with inductor, forward +
#      backward, in a fresh process with inductor's on-disk caches off (on 2026-11-26, H200,
#      torch 2.11, the compiled backward of relpos failed a stride assertion at a new shape, in
#      a process that had loaded another process's compiled graph: which of the two causes it
#      is open);
#   2. training at WMT lengths: the benchmark's WMT-like batches, base, fp16 then bf16, 3
#      interleaved rounds, stock and every position method and CSAN, each under the default
#      policy and (NAME@cpu+cuda) under a policy whose distance_devices include cuda, in the
#      same rounds (a system whose layers take the same paths under both is measured once);
#   3. the encoder sweep at L = 512 then 1024 (forward + backward, base, fp16 then bf16), the
#      path auto takes, both policies likewise;
#   4. graphs compiled over 11 batch shapes with inductor, inference forward.
# Every JSON records the card, torch, the commit (or the sources hash without .git) and the
# paths each system's layers take at each measured shape. How to read it: docs/benchmark.md,
# "To be measured on GPU".
# Needs, in .whl/ (git-ignored through .git/info/exclude; carried with the call), the wheels the
# GPU machine lacks (its python3 is 3.12 with torch; nothing can be fetched there), made here:
#   P="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $P \
#       -d .whl ve-fairseq==0.12.3 hydra-core==1.3.8 omegaconf==2.3.1 bitarray==3.12.3 cffi==2.1.1 pycparser
#   python3 -m pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3   # an sdist only
# (2026-11-26: 21 MB in all). Then, through the device tool: bash benchmarks/gpu_checks.sh,
# carry .whl, timeout_s 600 (the steps share GPU_CHECKS_BUDGET = 540 s).
# GPU_CHECKS_DRY=1 runs the same steps on this machine's CPU at tiny sizes (a check of the script;
# fp32 stands in for fp16, which the CPU does not train; every limit times GPU_CHECKS_DRY_SCALE,
# default 6, for a shared CPU). Exit status 1 when a step failed or ran out of its time.
set -u
OUT=${OUT:-/tmp/gpu_checks_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
DEV=cuda; COMPILE=inductor; PRESET=(--preset base); HALF=fp16; TRAIN=(--train); SCALE=1
if [ "${GPU_CHECKS_DRY:-0}" = 1 ]; then
    DEV=cpu; COMPILE=aot_eager; PRESET=(--preset tiny --threads 1); HALF=fp32; TRAIN=()
    SCALE=${GPU_CHECKS_DRY_SCALE:-6}
else
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
fi
BUDGET=${GPU_CHECKS_BUDGET:-$((540 * SCALE))}  # seconds for all steps together
BENCH=(python3 -m fairseq_attn_plugins.cli.bench --device "$DEV")
# the position methods and CSAN, for the numerics and the training at WMT lengths
METHODS="relpos,rope,alibi,t5bias,csan1d,csan2d"
# the policy auto has today, and one that takes the distance kernels on CUDA too
POLICIES=(--distance-devices cpu --distance-devices cpu,cuda)

FAILED=(); SKIPPED=()
step() {  # step NAME LIMIT_S COMMAND...: runs with min(LIMIT_S, time left), log in $OUT/NAME.log
    local name=$1 limit=$(($2 * SCALE)) left=$((BUDGET - SECONDS)) rc
    shift 2
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 20 ]; then echo "== $name: skipped, ${left}s left"; SKIPPED+=("$name"); return; fi
    echo "== $name (limit ${limit}s, at ${SECONDS}s)"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "-- $name: exit $rc after ${SECONDS}s$([ $rc = 124 ] && echo ' (out of time)')"
    [ $rc = 0 ] || FAILED+=("$name")
    grep -v -E "^INFO|^WARNING|Warning|warn\(" "$OUT/$name.log" | tail -n "${TAIL:-12}"
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
    lscpu | grep -E "^Model name|^CPU\(s\)"
    python3 -c "import sys, torch, fairseq; print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.version.cuda, '| fairseq', fairseq.__version__)"
    # the device tool copies the working tree, not necessarily its .git: the sources hash too
    python3 -c "from fairseq_attn_plugins.bench.report import provenance; print(provenance())" 2>/dev/null
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

# 0. numerics of the new CUDA kernels (CPU entries too: the table is checked per device)
TAIL=20 step kernels 90 python3 -m pytest -q -p no:cacheprovider -n 0 tests/test_distance_kernels_devices.py \
    tests/test_flex_attention.py::test_cuda_flex_kernel_matches_explicit_in_fp16
for DT in "$HALF" bf16; do
    TAIL=8 step "numerics_$DT" 60 "${BENCH[@]}" --mode numerics --dtype "$DT" --systems "$METHODS" \
        --json "$OUT/numerics_$DT.json"
done
# 1. flex training settled: a fresh process, inductor's caches off
TORCHINDUCTOR_FX_GRAPH_CACHE=0 TORCHINDUCTOR_AUTOGRAD_CACHE=0 step graphs_train 120 \
    python3 benchmarks/diagnostics/flex_graph_count.py --device "$DEV" --compile "$COMPILE" "${TRAIN[@]}"
# 2. training at WMT lengths, both policies in the same rounds
# (no JSON from a step cut off: fp16 gets the longer limit, bf16 what is left up to 150 s)
for DT in "$HALF" bf16; do
    TAIL=30 step "train_wmt_$DT" "$([ "$DT" = bf16 ] && echo 150 || echo 180)" "${BENCH[@]}" "${PRESET[@]}" --dtype "$DT" --mode train --no-infer \
        --repeats 3 --systems "$METHODS" "${POLICIES[@]}" --json "$OUT/train_wmt_$DT.json"
done
# 3. the encoder sweep on the path auto takes, both policies in the same rounds
for DT in "$HALF" bf16; do
    for L in 512 1024; do
        TAIL=30 step "sweep_${L}_$DT" 100 "${BENCH[@]}" "${PRESET[@]}" --dtype "$DT" --sweep lengths \
            --lengths "$L" --systems '*/auto' --repeats 3 "${POLICIES[@]}" --json "$OUT/sweep_${L}_$DT.json"
    done
done
# 4. inference graphs
step graphs_infer 60 python3 benchmarks/diagnostics/flex_graph_count.py --device "$DEV" --compile "$COMPILE"
echo "== done at ${SECONDS}s; failed or out of time: ${FAILED[*]:-none}; skipped: ${SKIPPED[*]:-none}"
[ ${#FAILED[@]} = 0 ]
