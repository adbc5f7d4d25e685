#!/usr/bin/env bash
# README step 1: set up .venv (if needed) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
. .venv/bin/activate
exec python -m pytest -q tests "$@"
