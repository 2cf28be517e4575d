#!/usr/bin/env bash
# Run an ablation sweep, then print its summary table.
# Usage: scripts/ablate.sh [SWEEP_SPEC] [--parallel N] [--out DIR] [key.path=value ...]
#   SWEEP_SPEC  default configs/sweeps/quick.yaml  ->  results/<sweep name>/
# Example: scripts/ablate.sh configs/sweeps/quick.yaml --parallel 2 train.steps=50
set -euo pipefail
spec=configs/sweeps/quick.yaml
if [[ $# -gt 0 && $1 != -* && $1 != *=* ]]; then
    spec=$(realpath -m -- "$1")  # relative to where the user stands, not the repo root
    shift
fi
source "$(dirname "${BASH_SOURCE[0]}")/_python.sh"
exec "$PYTHON" -m trainer sweep --config "$spec" "$@"
