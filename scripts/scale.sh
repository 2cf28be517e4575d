#!/usr/bin/env bash
# Pre-registration 3 (results/PREREGISTRATION-SCALE.md): the instability claims' sub-sweeps in the
# reference setting (results/reference/scale/; init_ctl: pre-registration 4,
# results/PREREGISTRATION-INIT.md), then the model-size ladder's rung d = 32
# (results/ladder/d32/), in named parts. Each part skips finished runs and resumes unfinished
# ones; commit each part's runs as soon as it finishes. Run from a clean checkout: the runs record
# the commit they came from. A best part reads the best rates of its grid and refuses to start
# without it; `collapse` reruns the failing Post-LN warm-up runs that the committed runs name
# (python -m trainer.findings.collapse lists them), so it runs after `deep_lr`. A part named
# SUB_extN is the edge rule's Nth step on sub-sweep SUB (configs/sweeps/scale/SUB_extN.yaml,
# which says why it runs): its runs go into SUB's directory, named as SUB's runs are. Those
# steps were written by hand before `sweep --edge-rule` (trainer/edge_rule.py) existed; every
# rate grid now runs with it, and it finds those steps' runs by their names, so rerunning a
# part asks for exactly the steps that are still missing.
#
# Usage: scripts/scale.sh [PART ...] [--parallel N]     (default: every part, --parallel 2)
#   PART: inst_lr place_lr place_lr_ext1 place_lr_ext2 place_best deep_lr deep_depth
#         deep_depth_ext1 collapse init_ctl  d32_lr d32_best  wide_edge  findings
# wide_edge: section 3's "wide included": the edge rule's steps on the wide setting's rate grids
# (seed 0, into results/replication/wide/lr). Its `best` runs sit at the old best rates under
# names without the rate, so seeds at a moved best need a directory of their own (not designed
# yet); `sweep` refuses a run directory whose config differs, so nothing committed is touched.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_python.sh"
all_parts=(inst_lr place_lr place_lr_ext1 place_lr_ext2 place_best deep_lr deep_depth deep_depth_ext1
           collapse init_ctl d32_lr d32_best wide_edge findings)
source scripts/_parts.sh "$@"  # after _python.sh: the cwd is the repository root
sweep() { "$PYTHON" -m trainer sweep --config "$1" --out "$2" "${@:3}" "${args[@]}"; }
for part in "${parts[@]}"; do
  echo "== scale part: $part ($(date +%H:%M:%S))"
  case "$part" in
    inst_lr|place_lr|deep_lr|deep_depth|init_ctl)  # rate grids: then the edge rule's steps
      sweep "configs/sweeps/scale/$part.yaml" "results/reference/scale/$part" --edge-rule ;;
    place_best)
      sweep "configs/sweeps/scale/$part.yaml" "results/reference/scale/$part" ;;
    *_ext[0-9]*)  # the edge rule's steps: into the sub-sweep they extend
      sweep "configs/sweeps/scale/$part.yaml" "results/reference/scale/${part%_ext*}" ;;
    collapse)
      "$PYTHON" -m trainer.findings.collapse results/reference --run ;;
    d32_lr)  # seed 0 at RATE_GRID, then the edge rule (sweep --edge-rule) before any best
      d=configs/sweeps/ladder/d32
      sweep "$d/lr.yaml" results/ladder/d32/lr --edge-rule
      sweep "$d/lr_dyt.yaml" results/ladder/d32/lr --edge-rule
      sweep "$d/lr_scale.yaml" results/ladder/d32/scale_lr --edge-rule ;;
    d32_best)
      d=configs/sweeps/ladder/d32
      sweep "$d/best.yaml" results/ladder/d32/best
      sweep "$d/best_dyt.yaml" results/ladder/d32/best
      sweep "$d/best_scale.yaml" results/ladder/d32/scale_best ;;
    wide_edge)
      w=configs/sweeps/replication/wide
      sweep "$w/lr.yaml" results/replication/wide/lr --edge-rule
      sweep "$w/lr_dyt.yaml" results/replication/wide/lr --edge-rule ;;
    findings)
      "$PYTHON" -m trainer findings results/reference > /dev/null && echo "wrote results/README.md" ;;
    *) echo "error: unknown part '$part'" >&2; exit 2 ;;
  esac
done
