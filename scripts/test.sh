#!/usr/bin/env bash
# Set up a virtual environment and run the test suite: the one command README and CI use.
#   bash scripts/test.sh [pytest args...]   (every test; a plain `pytest` runs the quick ones)
# TORCH_SPEC picks the torch build: the default is the CPU build CI uses; a GPU user can pass
# e.g. TORCH_SPEC='torch>=2.5' (or keep the torch already in the venv).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
EXTRAS=${EXTRAS:-test,real,hf,ray,slurm,deploy}  # the optional extras too, so their tests run
PYTHON=${PYTHON:-python3}

say() { echo "[test.sh] $*" >&2; }
if [ ! -x "$VENV/bin/python" ]; then
  say "creating the virtual environment $VENV (a few seconds)"
  "$PYTHON" -m venv "$VENV"
fi
pip_install() { "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@"; }
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  say "installing $TORCH_SPEC (about 1 minute for the CPU build)"
  pip_install "$TORCH_SPEC"
fi
say "installing attnsuite with the extras [$EXTRAS] (1-2 minutes the first time, seconds after)"
pip_install -e ".[$EXTRAS]"
WORKERS=${WORKERS:-2}  # pytest-xdist workers, one per core of the 2-core machine CI runs on; WORKERS=0 runs in one process
say "running every test, the slow ones too, on $WORKERS workers (about 7 minutes on a quiet 2-core machine, longer on a busy one; CUDA-only tests are skipped with the reason)"
# -m "": the slow tests too (pyproject's addopts deselects them for a plain `pytest`); a -m of yours comes later and wins.
# loadgroup: a module marked xdist_group runs on one worker (one Ray instance), the groups first; a test marked serial
# runs while no other test does (tests/conftest.py)
exec "$VENV/bin/python" -m pytest -q -m "" -n "$WORKERS" --dist loadgroup "$@"
