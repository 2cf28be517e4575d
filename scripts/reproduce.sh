#!/usr/bin/env bash
# Rerun a finished run from its saved config.yaml and compare summary + every curve.
# Usage: scripts/reproduce.sh RUN_DIR [--out DIR]
#   exit 0: identical (CPU) or within rtol=1e-3/atol=1e-5 (GPU/TPU); 1: mismatch; 2: bad RUN_DIR
set -euo pipefail
if [[ $# -lt 1 ]]; then
    sed -n '2,4p' "$0" >&2
    exit 2
fi
run_dir=$(realpath -m -- "$1")
shift
args=()
if [[ $# -ge 2 && $1 == --out ]]; then
    args=(--out "$(realpath -m -- "$2")")
    shift 2
fi
source "$(dirname "${BASH_SOURCE[0]}")/_python.sh"
exec "$PYTHON" -m trainer reproduce "$run_dir" "${args[@]}" "$@"
