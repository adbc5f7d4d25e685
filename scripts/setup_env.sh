#!/usr/bin/env bash
# Create/refresh .venv with everything the package needs (CPU torch, fairseq, tools).
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
. .venv/bin/activate
pyver=$(python -c 'import sys; print("%d%02d" % sys.version_info[:2])')
# pip's expected noise: local-index warnings, and the resolver reminding us that
# fairseq's torchaudio requirement is deliberately not installed (see README)
pipq() {
  python -m pip install -q --disable-pip-version-check "$@" 2> >(grep -vE \
    "^WARNING: Location|dependency resolver does not currently|requires torchaudio" >&2)
}
# torch: pinned so that pip takes the CPU wheel instead of a multi-GB CUDA build
python -c 'import torch' 2>/dev/null || pipq "torch==${TORCH_VERSION:-2.13.0}"
# fairseq 0.12.2 does not import on Python >= 3.11; ve-fairseq 0.12.3 is fairseq
# main with the minimal fix. --no-deps: its torchaudio requirement drags in another torch.
if ! python -c 'import fairseq' 2>/dev/null; then
  if (( pyver >= 311 )); then pipq --no-deps "ve-fairseq==0.12.3"; else pipq --no-deps "fairseq==0.12.2"; fi
fi
pipq -r requirements.txt
# the Greek-English New Testament of recipes/bible_grc_en: its data files only, installed outside
# site-packages (.venv/share/bible-alignments, where fairseq_attn_recipes/bible.py reads them): its
# code's dependencies (django, jupyterlab...) are not needed, and pip checks only site-packages, so
# no later install reports them as conflicts. An older set-up's copy in site-packages is moved there.
bible_home=.venv/share/bible-alignments
if python -c 'import importlib.metadata as m; m.distribution("bible-alignments")' 2>/dev/null; then
  python -m pip uninstall -y -q bible-alignments
fi
[[ -d $bible_home/data/sources ]] || pipq --no-deps --target "$bible_home" "bible-alignments==0.4.2"
pipq --no-deps -e .
# COMET (the comet extra): optional for users, installed here because the tests score with a
# tiny COMET checkpoint; WITH_COMET=0 leaves it out. The installed torch is kept (constraint);
# unbabel-comet brings numpy 1.26 (it pins numpy < 2), transformers and pytorch-lightning.
if [[ ${WITH_COMET:-1} == 1 ]] && ! python -c 'import comet' 2>/dev/null; then
  pipq -e ".[comet]" "torch==$(python -c 'import torch; print(torch.__version__.split("+")[0])')"
fi
python -c 'import fairseq_attn_plugins, fairseq, torch; print("ready: torch", torch.__version__, "fairseq", fairseq.__version__)' 2>&1 | grep -v tensorboardX
