#!/usr/bin/env bash
# Pre-registration 2 (results/PREREGISTRATION-REPLICATION.md): DyT by its authors' recipe in the
# reference setting, then the headline variants in three replication settings, in named parts.
# Each part skips finished runs and resumes unfinished ones; commit each part's runs as soon as
# it finishes. Run from a clean checkout: the runs record the commit they came from. A `best`
# part reads the best rates of its `lr` part and refuses to start without it.
#
# Usage: scripts/replication.sh [PART ...] [--parallel N]     (default: every part, --parallel 2)
#   PART: dyt_recipe_lr dyt_recipe  SETTING_lr SETTING_best SETTING_init (SETTING: python long
#         wide)  extra_reference extra_python (pre-registration 2's extra seeds, once the
#         setting's own parts are done)  findings
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_python.sh"
all_parts=(dyt_recipe_lr dyt_recipe python_lr python_best python_init extra_reference extra_python
           long_lr long_best long_init wide_lr wide_best wide_init findings)
source scripts/_parts.sh "$@"  # after _python.sh: the cwd is the repository root
specs=configs/sweeps/replication
sweep() { "$PYTHON" -m trainer sweep --config "$1" --out "$2" "${args[@]}"; }
for part in "${parts[@]}"; do
  echo "== replication part: $part ($(date +%H:%M:%S))"
  case "$part" in
    dyt_recipe_lr|dyt_recipe)
      sweep "$specs/$part.yaml" "results/reference/$part" ;;
    python_lr|long_lr|wide_lr)
      s=${part%_lr}
      sweep "$specs/$s/lr.yaml" "results/replication/$s/lr"
      sweep "$specs/$s/lr_dyt.yaml" "results/replication/$s/lr" ;;
    python_best|long_best|wide_best)
      s=${part%_best}
      sweep "$specs/$s/best.yaml" "results/replication/$s/best"
      sweep "$specs/$s/best_dyt.yaml" "results/replication/$s/best" ;;
    python_init|long_init|wide_init)
      s=${part%_init}
      "$PYTHON" -m trainer analyze grad-profile --config "configs/settings/$s.yaml" \
        --out "results/replication/$s/init" ;;
    extra_reference)
      "$PYTHON" -m trainer extra-seeds results/reference "${args[@]}" ;;
    extra_python)
      "$PYTHON" -m trainer extra-seeds results/replication/python "${args[@]}" ;;
    findings)
      "$PYTHON" -m trainer findings results/reference > /dev/null && echo "wrote results/README.md" ;;
    *) echo "error: unknown part '$part'" >&2; exit 2 ;;
  esac
done
