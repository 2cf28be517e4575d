#!/usr/bin/env bash
# Regenerate results/reference/ in named sub-sweeps (each <= 45 min on 2 CPU cores, about 5 h in
# all), then results/README.md (the findings). Each part skips finished runs and resumes
# unfinished ones, so rerunning after an interruption loses nothing; commit each part's runs as
# soon as it finishes. Run from a clean checkout: the runs record the commit they came from.
#
# Usage: scripts/reference.sh [PART ...] [--parallel N]     (default: every part, --parallel 2)
#   PART: grid_a grid_b grid_c grid_d lr calibration pad_to_max small_batch dyt affine depth_2 depth_12 init analysis findings
#   (analysis reproduces 12 grid runs and the 3 affine runs to get their final checkpoints, ~45 min)
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
[[ ${#parts[@]} -eq 0 ]] && parts=(grid_a grid_b grid_c grid_d lr calibration pad_to_max small_batch dyt affine depth_2 depth_12 init analysis findings)
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
    pad_to_max|small_batch|dyt|affine)
      "$PYTHON" -m trainer sweep --config "configs/sweeps/reference_$part.yaml" --out "$out/$part" "${args[@]}" ;;
    depth_2|depth_12)
      "$PYTHON" -m trainer sweep --config "configs/sweeps/reference_$part.yaml" --out "$out/depth" "${args[@]}" ;;
    init)
      "$PYTHON" -m trainer analyze grad-profile --config configs/reference.yaml --out "$out/init" ;;
    analysis)
      # The analyses read final checkpoints, which are not committed: each grid run they need is
      # reproduced into runs/ckpt/ (verified IDENTICAL or WITHIN TOLERANCE on the way).
      ckpt() {  # ckpt NORM RESIDUAL: the three seeds' checkpointed run dirs -> $CK
        CK=()
        for s in "" ",seed=1" ",seed=2"; do
          local r="norm=$1,residual=$2,placement=pre$s"
          [[ -f "runs/ckpt/$r/summary.json" ]] || "$PYTHON" -m trainer reproduce "$out/grid/$r" --out "runs/ckpt/$r"
          CK+=("runs/ckpt/$r")
        done
      }
      ckpt layer true; ln=("${CK[@]}"); ckpt batch true; bn=("${CK[@]}")
      ckpt rms true; rms=("${CK[@]}"); ckpt layer false; ln_nores=("${CK[@]}")
      "$PYTHON" -m trainer analyze batch-size "${ln[@]}" "${bn[@]}" --out "$out/analysis"
      "$PYTHON" -m trainer analyze composition "${ln[@]}" "${rms[@]}" "${bn[@]}" --out "$out/analysis"
      "$PYTHON" -m trainer analyze padding "${bn[@]}" --out "$out/analysis"
      aff=()  # the affine part's runs (F10), reproduced the same way into runs/ckpt/affine-*
      for s in "" ",seed=1" ",seed=2"; do
        r="norm_affine=false$s"
        if [[ ! -f "$out/affine/$r/config.yaml" ]]; then
          echo "analysis: skipping $out/affine/$r in analyze stream (not run yet: part 'affine')" >&2
          continue
        fi
        if compgen -G "$out/affine/$r/checkpoints/*.index" > /dev/null; then
          aff+=("$out/affine/$r")  # made on this machine: its own final checkpoint
        else
          [[ -f "runs/ckpt/affine-$r/summary.json" ]] || "$PYTHON" -m trainer reproduce "$out/affine/$r" --out "runs/ckpt/affine-$r"
          aff+=("runs/ckpt/affine-$r")
        fi
      done
      "$PYTHON" -m trainer analyze stream "${ln[@]}" "${ln_nores[@]}" ${aff[@]+"${aff[@]}"} --out "$out/analysis" ;;
    findings)
      "$PYTHON" -m trainer findings "$out" > /dev/null && echo "wrote results/README.md" ;;
    *) echo "error: unknown part '$part'" >&2; exit 2 ;;
  esac
done
