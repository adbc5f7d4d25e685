#!/usr/bin/env bash
# README step 2: set up .venv (if needed) and run the offline demo (the main job).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
. .venv/bin/activate
exec fairseq-attn-demo "$@"
