#!/usr/bin/env bash
# Regenerate results/reference/: the norm x residual x placement grid and the high-LR slice,
# then their tables and plots. About an hour on 2 CPU cores.
#   usage: scripts/reference.sh [--parallel N]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python3; [ -x .venv/bin/python ] && PY=.venv/bin/python
"$PY" -m trainer sweep --config configs/sweeps/reference.yaml --out results/reference/grid "${@:---parallel 2}"
"$PY" -m trainer sweep --config configs/sweeps/reference_lr.yaml --out results/reference/lr_slice "${@:---parallel 2}"
