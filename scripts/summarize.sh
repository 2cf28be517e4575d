#!/usr/bin/env bash
# Rebuild a results directory's tables (summary.csv/.md, runs.csv) and plots/*.png.
# Usage: scripts/summarize.sh RESULTS_DIR      e.g. scripts/summarize.sh results/quick
set -euo pipefail
if [[ $# -ne 1 ]]; then
    sed -n '2,3p' "$0" >&2
    exit 2
fi
results=$(realpath -m -- "$1")
source "$(dirname "${BASH_SOURCE[0]}")/_python.sh"
exec "$PYTHON" -m trainer summarize "$results"
