#!/usr/bin/env bash
# Regenerate results/reference/ in named sub-sweeps (each <= 45 min on 2 CPU cores, about 3 h in
# all), then results/README.md (the findings). Each part skips finished runs and resumes
# unfinished ones, so rerunning after an interruption loses nothing; commit each part's runs as
# soon as it finishes. Run from a clean checkout: the runs record the commit they came from.
#
# Usage: scripts/reference.sh [PART ...] [--parallel N]     (default: every part, --parallel 2)
#   PART: grid_a grid_b grid_c grid_d lr calibration init analysis findings
#   (analysis reads the grid's final checkpoints, which are not committed: run it on the machine
#   that made grid_a, or rerun grid_a's runs first)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_python.sh"
parts=() args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --parallel) args+=(--parallel "$2"); shift 2 ;;
    *) parts+=("$1"); shift ;;
  esac
done
[[ ${#args[@]} -eq 0 ]] && args=(--parallel 2)
[[ ${#parts[@]} -eq 0 ]] && parts=(grid_a grid_b grid_c grid_d lr calibration init analysis findings)
out=results/reference
for part in "${parts[@]}"; do
  echo "== reference part: $part ($(date +%H:%M:%S))"
  case "$part" in
    grid_a|grid_b|grid_c|grid_d)
      "$PYTHON" -m trainer sweep --config "configs/sweeps/reference_$part.yaml" --out "$out/grid" "${args[@]}" ;;
    lr)
      "$PYTHON" -m trainer sweep --config configs/sweeps/reference_lr.yaml --out "$out/lr_slice" "${args[@]}" ;;
    calibration)
      "$PYTHON" -m trainer sweep --config configs/sweeps/calibration.yaml --out "$out/calibration" "${args[@]}" ;;
    init)
      "$PYTHON" -m trainer analyze grad-profile --config configs/reference.yaml --out "$out/init" ;;
    analysis)
      "$PYTHON" -m trainer analyze batch-size "$out"/grid/norm={layer,batch,masked_batch},residual=true,placement=pre{,\,seed=1,\,seed=2} \
        --out "$out/analysis" ;;
    findings)
      "$PYTHON" -m trainer findings "$out" > /dev/null && echo "wrote results/README.md" ;;
    *) echo "error: unknown part '$part'" >&2; exit 2 ;;
  esac
done
