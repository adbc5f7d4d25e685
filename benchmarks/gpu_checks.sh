#!/usr/bin/env bash
# Every GPU check of the flex paths and the GPU length sweep, in one call of the device tool
# (one H100 / H200, at most 10 minutes; each step has its own limit and writes its log to $OUT,
# so what ran comes back even if a later step is cut off). Ordered by what matters most:
#   1. graphs compiled over 11 batch shapes with inductor, training (forward + backward), in a
#      fresh process with inductor's on-disk caches off (on 2026-11-26, H200, torch 2.11, the
#      compiled backward of relpos failed a stride assertion at a new shape, in a process that
#      had loaded another process's compiled graph: which of the two causes it is open);
#   2. the compiled flex kernels against the explicit path, fp16, forward + backward (pytest);
#   3. fp16 numerics of every architecture (fused / flex against explicit);
#   4. the GPU length sweep at L = 512 and 1024 (encoder forward + backward, base size, fp16);
#   5. graphs compiled over 11 batch shapes with inductor, inference forward.
# Needs, in .whl/ (git-ignored through .git/info/exclude; carried with the call), the wheels the
# GPU machine lacks (its python3 is 3.12 with torch; nothing can be fetched there), made here:
#   P="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $P \
#       -d .whl ve-fairseq==0.12.3 hydra-core==1.3.8 omegaconf==2.3.1 bitarray==3.12.3 cffi==2.1.1 pycparser
#   python3 -m pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3   # an sdist only
# (2026-11-26: 21 MB in all). Then, through the device tool: bash benchmarks/gpu_checks.sh, carry .whl.
# GPU_CHECKS_DRY=1 runs the same steps on this machine's CPU at tiny sizes (a check of the script).
set -u
OUT=${OUT:-/tmp/gpu_checks_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
BUDGET=${GPU_CHECKS_BUDGET:-560}  # seconds for all steps together
DEV=cuda; COMPILE=inductor; SWEEP=(--preset base); TRAIN=(--train)
if [ "${GPU_CHECKS_DRY:-0}" = 1 ]; then
    DEV=cpu; COMPILE=aot_eager; SWEEP=(--preset tiny --threads 1); TRAIN=()
else
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
fi

step() {  # step NAME LIMIT_S COMMAND...: runs with min(LIMIT_S, time left), log in $OUT/NAME.log
    local name=$1 limit=$2 left=$((BUDGET - SECONDS))
    shift 2
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 20 ]; then echo "== $name: skipped, ${left}s left"; return; fi
    echo "== $name (limit ${limit}s, at ${SECONDS}s)"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "-- $name: exit $? after ${SECONDS}s"
    grep -v -E "^INFO|^WARNING|Warning|warn\(" "$OUT/$name.log" | tail -n "${TAIL:-12}"
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
    lscpu | grep -E "^Model name|^CPU\(s\)"
    python3 -c "import sys, torch, fairseq; print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.version.cuda, '| fairseq', fairseq.__version__)"
    # the device tool copies the working tree, not necessarily its .git: a hash of the sources
    echo "sources sha256 $(git ls-files -z -- '*.py' '*.sh' | sort -z | xargs -0 cat | sha256sum | cut -c1-16)"
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

TORCHINDUCTOR_FX_GRAPH_CACHE=0 TORCHINDUCTOR_AUTOGRAD_CACHE=0 step graphs_train 140 \
    python3 benchmarks/diagnostics/flex_graph_count.py --device "$DEV" --compile "$COMPILE" "${TRAIN[@]}"
step flex_kernels 110 python3 -m pytest -q -p no:cacheprovider -n 0 tests/test_flex_attention.py -k cuda
TAIL=20 step numerics 90 python3 -m fairseq_attn_plugins.cli.bench --device "$DEV" --mode numerics \
    --json "$OUT/numerics.json"
for L in 512 1024; do
    TAIL=30 step "sweep_$L" 150 python3 -m fairseq_attn_plugins.cli.bench --device "$DEV" "${SWEEP[@]}" \
        --sweep lengths --lengths "$L" --systems '*/auto,*/fused,*/flex' --repeats 3 --json "$OUT/sweep_$L.json"
done
step graphs_infer 80 python3 benchmarks/diagnostics/flex_graph_count.py --device "$DEV" --compile "$COMPILE"
echo "== done at ${SECONDS}s"
