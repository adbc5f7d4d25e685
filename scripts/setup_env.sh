#!/usr/bin/env bash
# Create/refresh .venv with everything the package needs (CPU torch, fairseq, tools).
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# .venv/.created: written once the venv (pip included) is made; a set-up killed while making it
# makes it again over what it left (python -m venv on an existing folder keeps what is installed).
# pip is brought to 25 or later first: the pip that Python 3.11 bundles (23.2) spends about 37 s
# of CPU choosing among the index's files for this install, pip 26 about 11 s (measured here).
made=0
if [[ ! -x .venv/bin/python || ! -f .venv/.created ]]; then "$PY" -m venv .venv; made=1; fi
. .venv/bin/activate
pyver=$(python -c 'import sys; print("%d%02d" % sys.version_info[:2])')
# pip's expected noise: local-index warnings, the resolver reminding us that fairseq's torchaudio
# requirement is deliberately not installed (see README), and setuptools' block of advice on
# editable installs (pip >= 25 shows it: from its "BuildBackendWarning" line to "WheelFile")
pipq() {
  python -m pip install -q --disable-pip-version-check "$@" 2> >(awk '
    /BuildBackendWarning: Editable installation/ { advice = 1 }
    !advice && !/^WARNING: Location|dependency resolver does not currently|requires torchaudio/ { print }
    advice && /with strategy, WheelFile/ { advice = 0 }' >&2)
}
(( made == 0 )) || { pipq "pip>=25" && touch .venv/.created; }
# fairseq 0.12.2 does not import on Python >= 3.11; ve-fairseq 0.12.3 is fairseq main with the
# minimal fix. --no-deps: its torchaudio requirement drags in another torch; requirements.txt
# lists what it needs instead.
# Installed unless a fairseq distribution has pip's INSTALLER file (pip writes it after every file of
# the package, so a fairseq a killed install left half-copied is installed again) and imports.
if ! python -c 'import importlib.metadata as m, sys
sys.exit(not any(d.metadata["Name"].lower() in ("fairseq", "ve-fairseq") and d.read_text("INSTALLER")
                 for d in m.distributions()))
import fairseq' 2>/dev/null; then
  if (( pyver >= 311 )); then pipq --no-deps "ve-fairseq==0.12.3"; else pipq --no-deps "fairseq==0.12.2"; fi
fi
# One resolve for torch, fairseq's needs, this package and the comet extra (one pip call instead
# of four: about 8 s less on a fresh machine, measured here). torch is pinned so that pip takes the CPU wheel
# instead of a multi-GB CUDA build; a torch already installed is kept at its version.
torch_version=$(python -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || echo "${TORCH_VERSION:-2.13.0}")
# COMET (the comet extra): optional for users, installed here because the tests score with a
# tiny COMET checkpoint; WITH_COMET=0 leaves it out. unbabel-comet brings numpy 1.26 (it pins
# numpy < 2), transformers and pytorch-lightning.
extras=""; [[ ${WITH_COMET:-1} != 1 ]] || extras="[comet]"
# pip byte-compiles what it installs on one core (about 40 s of a fresh install); compile_packages.py
# on every core does the same in about 21 s (compileall -j 0: 31 s). The .pyc files are needed: with PYTHONDONTWRITEBYTECODE
# set, a module without one is compiled again at every import of every process. A file that does not
# compile is skipped: a few vendored files in site-packages are Python 2 (pip skips them too).
# The packages' own test suites (3,300 files in tests/ or test/ folders: pandas, sympy, scipy...)
# are left out: nothing imports them at run time (about 5 s).
pipq --no-compile -r requirements.txt "torch==$torch_version" -e ".$extras"
# Done again only when what was installed may have changed (the stamp: this script, the
# requirement files and the extras); checking every file costs a re-run about 4 s.
stamp=$( (cat scripts/setup_env.sh requirements.txt pyproject.toml; echo "extras=$extras torch=$torch_version") | sha256sum | cut -c1-16)
if [[ $(cat .venv/.compiled 2>/dev/null) != "$stamp" ]]; then
  python scripts/compile_packages.py "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null 2>&1 || true
  echo "$stamp" > .venv/.compiled
fi
# This package's own modules (installed editable, so not in site-packages): compiled on every run,
# since they change between runs (compileall redoes only the changed ones; a .pyc older than its
# source is ignored by Python). Every recipe step and fairseq process of the tests imports them:
# about 7 % of an end-to-end test's time without .pyc files, measured here. A module that does not
# compile is named and left to the tests (set-up goes on).
python -m compileall -q -j 0 $(for d in fairseq_attn_*/; do [[ -f $d/__init__.py ]] && echo "${d%/}"; done) || true
# the Greek-English New Testament of recipes/bible_grc_en: its data files only, installed outside
# site-packages (.venv/share/bible-alignments, where fairseq_attn_recipes/bible.py reads them): its
# code's dependencies (django, jupyterlab...) are not needed, and pip checks only site-packages, so
# no later install reports them as conflicts. An older set-up's copy in site-packages is moved there.
bible_home=.venv/share/bible-alignments
if python -c 'import importlib.metadata as m; m.distribution("bible-alignments")' 2>/dev/null; then
  python -m pip uninstall -y -q bible-alignments
fi
# Installed beside it, then renamed into place: a set-up killed part-way leaves no half-copied data
# there (the recipes check each data file against the package's RECORD too, fairseq_attn_recipes/bible.py).
if [[ ! -d $bible_home/data/sources ]]; then
  rm -rf "$bible_home.partial" "$bible_home"  # a killed set-up's leftovers: set-up alone writes here
  pipq --no-deps --target "$bible_home.partial" "bible-alignments==0.4.2"
  mv "$bible_home.partial" "$bible_home"
fi
# the install imports (fairseq as the package's commands import it: scikit-learn deferred, 1 s less)
python -c 'from fairseq_attn_records.fairseq_import import import_fairseq; import_fairseq()
import fairseq_attn_plugins, fairseq, torch; print("ready: torch", torch.__version__, "fairseq", fairseq.__version__)' 2>&1 | grep -v tensorboardX
