#!/usr/bin/env bash
# Rerun finished runs from their saved config.yaml and compare summary + every curve.
# Usage: scripts/reproduce.sh RUN_DIR|RESULTS_DIR [--out DIR] [--reuse] [--strict]
#                             [--sample N] [--seed S] [--parallel P]
#   exit 0: IDENTICAL or WITHIN TOLERANCE (every run); 1: a MISMATCH; 2: bad arguments
set -euo pipefail
if [[ $# -lt 1 ]]; then
    sed -n '3,5p' "$0" >&2
    exit 2
fi
# Paths are resolved here because _python.sh changes to the repository root.
args=("$(realpath -m -- "$1")")
shift
while [[ $# -gt 0 ]]; do
    if [[ $1 == --out && $# -ge 2 ]]; then
        args+=(--out "$(realpath -m -- "$2")")
        shift 2
    else
        args+=("$1")
        shift
    fi
done
source "$(dirname "${BASH_SOURCE[0]}")/_python.sh"
exec "$PYTHON" -m trainer reproduce "${args[@]}"
