#!/usr/bin/env bash
# Regenerate results/reference/ in the pre-registered order (results/PREREGISTRATION.md), in
# named sub-sweeps of at most ~45 min each on 2 CPU cores, then results/README.md (the findings).
# Each part skips finished runs and resumes unfinished ones, so rerunning after an interruption
# loses nothing; commit each part's runs as soon as it finishes. Run from a clean checkout: the
# runs record the commit they came from. A part whose spec has `best_lr:` reads the best rates of
# an earlier part (lr before best, depth_lr before depth, ...) and refuses to start without it.
#
# Usage: scripts/reference.sh [PART ...] [--parallel N]     (default: every part, --parallel 2)
#   PART: lr_a lr_b lr_c best_a best_b depth_lr depth dyt_lr dyt affine_lr affine pad_to_max
#         small_batch init analysis findings
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_python.sh"
all_parts=(lr_a lr_b lr_c best_a best_b depth_lr depth dyt_lr dyt affine_lr affine pad_to_max
           small_batch init analysis findings)
source scripts/_parts.sh "$@"  # after _python.sh: the cwd is the repository root
out=results/reference
specs=configs/sweeps/reference
for part in "${parts[@]}"; do
  echo "== reference part: $part ($(date +%H:%M:%S))"
  case "$part" in
    lr_a|lr_b|lr_c)
      "$PYTHON" -m trainer sweep --config "$specs/$part.yaml" --out "$out/lr" "${args[@]}" ;;
    best_a|best_b)
      "$PYTHON" -m trainer sweep --config "$specs/$part.yaml" --out "$out/best" "${args[@]}" ;;
    depth_lr|depth|dyt_lr|dyt|affine_lr|affine|pad_to_max|small_batch)
      "$PYTHON" -m trainer sweep --config "$specs/$part.yaml" --out "$out/$part" "${args[@]}" ;;
    init)
      "$PYTHON" -m trainer analyze grad-profile --config configs/reference.yaml --out "$out/init" ;;
    analysis)
      # The analyses read final checkpoints, which are not committed: a run made on this machine
      # has its own; any other is reproduced into runs/ckpt/ (verified on the way).
      ckpt() {  # ckpt GROUP RUN...: the checkpointed run dirs -> $CK
        local group=$1; shift; CK=()
        for r in "$@"; do
          if compgen -G "$out/$group/$r/checkpoints/*.index" > /dev/null; then
            CK+=("$out/$group/$r")
          else
            [[ -f "runs/ckpt/$group/$r/summary.json" ]] ||
              "$PYTHON" -m trainer reproduce "$out/$group/$r" --out "runs/ckpt/$group/$r"
            CK+=("runs/ckpt/$group/$r")
          fi
        done
      }
      seeds() {  # seeds NAME: the run names of seeds 0-2 of a best-rate variant
        echo "$1" "$1,seed=1" "$1,seed=2"
      }
      v() { echo "norm=$1,residual=$2,placement=pre,warmup_steps=50"; }
      ckpt best $(seeds "$(v layer true)"); ln=("${CK[@]}")
      ckpt best $(seeds "$(v batch true)"); bn=("${CK[@]}")
      ckpt best $(seeds "$(v rms true)"); rms=("${CK[@]}")
      ckpt best $(seeds "$(v layer false)"); ln_nores=("${CK[@]}")
      ckpt affine $(seeds "norm_affine=false"); aff=("${CK[@]}")
      ckpt best $(seeds "$(v dyt true)"); dyt=("${CK[@]}")
      ckpt best $(seeds "$(v none true)"); none=("${CK[@]}")
      ckpt best $(seeds "$(v masked_batch true)"); mbn=("${CK[@]}")
      "$PYTHON" -m trainer analyze batch-size "${ln[@]}" "${bn[@]}" --out "$out/analysis"
      "$PYTHON" -m trainer analyze composition "${ln[@]}" "${rms[@]}" "${bn[@]}" --out "$out/analysis"
      "$PYTHON" -m trainer analyze padding "${bn[@]}" --out "$out/analysis"
      "$PYTHON" -m trainer analyze stream "${ln[@]}" "${ln_nores[@]}" "${aff[@]}" --out "$out/analysis"
      # F15, F16 (every norm, Pre + residual) and F17 (LayerNorm)
      "$PYTHON" -m trainer analyze decode "${ln[@]}" "${rms[@]}" "${dyt[@]}" "${none[@]}" "${bn[@]}" \
        "${mbn[@]}" --out "$out/analysis"
      "$PYTHON" -m trainer analyze ln-backward "${ln[@]}" --out "$out/analysis"
      # F13, F18: LN's definition measured (no runs, no checkpoint)
      "$PYTHON" -m trainer analyze ln-numbers --out "$out/analysis"
      "$PYTHON" -m trainer analyze ln-epsilon --out "$out/analysis" ;;
    findings)
      "$PYTHON" -m trainer findings "$out" > /dev/null && echo "wrote results/README.md" ;;
    *) echo "error: unknown part '$part'" >&2; exit 2 ;;
  esac
done
