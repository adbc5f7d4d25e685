#!/usr/bin/env bash
# README step 1: set up .venv (if needed), lint, then run the whole test suite in parallel
# workers (pytest-xdist, one per core; TEST_WORKERS=1 runs them in one process).
# Extra arguments go to pytest, e.g. the inner loop without the end-to-end runs:
#   bash scripts/test.sh -m "not e2e"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
. .venv/bin/activate
ruff check --quiet . || { echo "lint failed (ruff check .): fix the lines above" >&2; exit 1; }
start=$(date +%s)
rc=0
python -m pytest -q tests -n "${TEST_WORKERS:-auto}" --dist loadgroup --durations=15 "$@" || rc=$?
echo "tests: $(( $(date +%s) - start )) s of wall time (exit $rc)"
exit $rc
