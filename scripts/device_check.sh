#!/usr/bin/env bash
# Device check (#13 part 6), within 8 minutes on one GPU: `bench` in bfloat16 with a token budget
# sized for the device, a 2-replica `mirrored` training run when two GPUs are visible, and the
# quick sweep; the timings (and the bench report) go into one JSON, DIR/gpu.json.
#
# Usage: scripts/device_check.sh [--dry-run] [--out DIR] [--tokens-per-batch N]
#   --out DIR             where gpu.json goes (default results/bench); the bench report, the
#                         mirrored run, the sweep and the logs go under DIR/device_check/
#   --tokens-per-batch N  the token budget of a bench/mirrored batch (default 32768)
#   --dry-run             tiny sizes that run on a CPU in about a minute (tiny model, a few
#                         steps, the quick sweep collapsed to one variant): checks the script
# Each section runs under its own time limit (BENCH_S, MIRRORED_S, SWEEP_S seconds); one that
# fails or times out is recorded with its exit code, and the script then exits 1 at the end.
set -euo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
out=results/bench
tokens=32768
dry=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --dry-run) dry=1; shift ;;
        --out) [[ $# -ge 2 ]] || { echo "error: --out needs a directory" >&2; exit 2; }
               out=$2; shift 2 ;;
        --tokens-per-batch)
               [[ $# -ge 2 && $2 =~ ^[1-9][0-9]*$ ]] || {
                   echo "error: --tokens-per-batch needs a positive integer" >&2; exit 2; }
               tokens=$2; shift 2 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
out=$(realpath -m -- "$out")
source "$(dirname "${BASH_SOURCE[0]}")/_python.sh"
work=$out/device_check
rm -rf "$work"
mkdir -p "$work"
timings=$work/timings.tsv
: >"$timings"

if [[ $dry == 1 ]]; then
    sizes=(model.num_layers=1 model.dim=32 model.num_heads=2 model.ffn_dim=64
           data.vocab_size=512 data.max_len=32 "data.buckets=[16,32]" data.tokens_per_batch=256
           data.eval_batches=2 runtime.xla=false runtime.mixed_precision=false)
    bench_flags=(--steps 2 --pairs 2 --no-profile --matmul-sizes 64,128)
    steps=(train.steps=4 train.warmup_steps=2 train.eval_every=2 train.log_every=1
           train.checkpoint_every=2)
    # Every variant gets the same norm and residual: the grid collapses to one variant.
    sweep_args=("${sizes[@]}" "${steps[@]}" model.norm=layer model.residual=true)
    : "${BENCH_S:=300}" "${MIRRORED_S:=120}" "${SWEEP_S:=120}"
else
    sizes=(data.tokens_per_batch="$tokens" runtime.mixed_precision=true)
    bench_flags=(--steps 40 --pairs 5 --matmul-sizes 4096,8192,12288)
    steps=(train.steps=200)
    sweep_args=()  # the quick sweep as it is
    : "${BENCH_S:=240}" "${MIRRORED_S:=90}" "${SWEEP_S:=180}"
fi

# section NAME LIMIT_S COMMAND...: run it under `timeout`; append NAME, exit code, seconds.
failed=0
section() {
    local name=$1 limit=$2 rc=0 t0=$EPOCHREALTIME
    shift 2
    echo "== $name (limit $limit s): $*" >&2
    timeout "$limit" "$@" >"$work/$name.log" 2>&1 || rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(awk "BEGIN {print $EPOCHREALTIME - $t0}")" >>"$timings"
    if [[ $rc != 0 ]]; then
        failed=1
        echo "   $name failed (exit $rc); the end of $work/$name.log:" >&2
        tail -n 5 "$work/$name.log" >&2
    fi
}

section bench "$BENCH_S" "$PYTHON" -m trainer bench --out "$work/bench.json" \
    "${bench_flags[@]}" "${sizes[@]}"

gpus=$("$PYTHON" -c 'import trainer; tf = trainer.import_tensorflow_quietly()
print(len(tf.config.list_physical_devices("GPU")))' 2>/dev/null | tail -n 1)
if [[ $gpus -ge 2 ]]; then
    section mirrored "$MIRRORED_S" "$PYTHON" -m trainer train --config configs/bench.yaml \
        --workdir "$work/mirrored" --quiet runtime.strategy=mirrored "${sizes[@]}" "${steps[@]}"
fi

section sweep "$SWEEP_S" "$PYTHON" -m trainer sweep --config configs/sweeps/quick.yaml \
    --parallel 1 --out "$work/sweep" "${sweep_args[@]}"

"$PYTHON" -m trainer.bench.device "$work" "$out/gpu.json" --gpus "$gpus" --dry-run "$dry"
exit "$failed"
