#!/usr/bin/env bash
# Open TensorBoard on a results directory (curves, HParams table, per-block custom scalars).
# Usage: scripts/tensorboard.sh [RESULTS_DIR] [tensorboard options ...]
#   RESULTS_DIR  default results/ ; e.g. scripts/tensorboard.sh results/quick --port 6007
set -euo pipefail
logdir=results
if [[ $# -gt 0 && $1 != -* ]]; then
    logdir=$(realpath -m -- "$1")
    shift
fi
source "$(dirname "${BASH_SOURCE[0]}")/_python.sh"
exec "$PYTHON" -m tensorboard.main --logdir "$logdir" "$@"
