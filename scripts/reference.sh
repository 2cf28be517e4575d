#!/usr/bin/env bash
# Regenerate results/reference/: the norm x residual x placement grid and the high-LR slice,
# each with its tables and plots, then results/README.md (the findings). About an hour on 2 CPU cores.
# Usage: scripts/reference.sh [--parallel N]      (default --parallel 2)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_python.sh"
args=("$@"); [[ ${#args[@]} -eq 0 ]] && args=(--parallel 2)
"$PYTHON" -m trainer sweep --config configs/sweeps/reference.yaml --out results/reference/grid "${args[@]}"
"$PYTHON" -m trainer sweep --config configs/sweeps/reference_lr.yaml --out results/reference/lr_slice "${args[@]}"
"$PYTHON" -m trainer.results.findings results/reference
