#!/usr/bin/env bash
# On a GPU host: where one training step's GPU time goes, dslaunch against
# PyTorch (eager and torch.compile) on the same model and batch.
#   MODEL=124m bash scripts/gpu-step-profile.sh
# Each program runs under Nsight Compute, which times every kernel of a window
# of launches after warm-up (kernels run one at a time there, so only the
# kernel times count, not the profiled run's wall time);
# scripts/bench/kernel_time_table.py cuts out one step and tables it by kernel
# family and name. The same programs run once more without the profiler for
# the step's wall time, so the table says how long the GPU sat idle.
# Environment: MODEL, STAGE, EXTRA (more dsrank flags), PYTORCH (modes to
# profile; empty for none), NCU_TIMEOUT. Results: $OUT/profile-*.md (or gpu-out/).
set -uo pipefail
source "$(dirname "$0")/gpu-bench-env.sh"
cd "$root"
model=${MODEL:-124m}
case $model in
  124m) shape=(12 12 768) skip=6000 count=2000 ;;
  350m) shape=(24 16 1024) skip=10000 count=5000 ;;
  1.3b) shape=(24 16 2048) skip=10000 count=5000 ;;
  *) echo "unknown MODEL $model (124m, 350m, 1.3b)"; exit 2 ;;
esac
layers=${shape[0]} heads=${shape[1]} width=${shape[2]} vocab=50304
ncu_run() {  # csv command...
  local csv=$1; shift
  timeout "${NCU_TIMEOUT:-300}" ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --launch-skip "$skip" --launch-count "$count" "$@" >"$csv" 2>"$csv.err"
}
dsrank_args=(configs/gpt-124m.cfg --device cuda --override "data.prepared=$data/fortunes-all-byte"
  --override model.layers=$layers --override model.heads=$heads --override model.width=$width
  --override model.vocab_size=$vocab --override train.micro_batch_size=16 --override ds_config.steps_per_print=10
  --override ds_config.zero_optimization.stage=${STAGE:-0} ${EXTRA:-})
"$bin/dsrank" "${dsrank_args[@]}" --override train.steps=30 >"$out/profile-dsrank-wall.log" 2>&1
tps=$(grep -o 'tokens/s=[0-9]*' "$out/profile-dsrank-wall.log" | tail -n +2 | sed 's/.*=//' |
  awk '{s += $1; n++} END {if (n) printf "%.0f", s / n}')
wall=$(awk -v t="${tps:-0}" 'BEGIN { if (t > 0) printf "%.3f", 16 * 1024 / t * 1000; else print 0 }')
ncu_run "$out/profile-dsrank.csv" "$bin/dsrank" "${dsrank_args[@]}" --override train.steps=40
{
  echo "## dslaunch ZeRO-${STAGE:-0}, $model, batch 16 x 1024 ($tps tokens/s without the profiler)"
  python3 scripts/bench/kernel_time_table.py "$out/profile-dsrank.csv" --step_marker 'fused_adamw' --wall_ms "$wall"
} >"$out/profile-dsrank-$model.md" 2>&1
cat "$out/profile-dsrank-$model.md"
for mode in ${PYTORCH-eager compile}; do
  flag=()
  [[ $mode == compile ]] && flag=(--compile)
  py=(python3 scripts/bench/pytorch_gpt.py --layers $layers --heads $heads --width $width --vocab $vocab --batch 16 "${flag[@]}")
  "${py[@]}" --steps 30 >"$out/profile-pytorch-$mode-wall.log" 2>&1
  tps=$(grep -o 'tokens_per_s=[0-9]*' "$out/profile-pytorch-$mode-wall.log" | sed 's/.*=//')
  wall=$(awk -v t="${tps:-0}" 'BEGIN { if (t > 0) printf "%.3f", 16 * 1024 / t * 1000; else print 0 }')
  ncu_run "$out/profile-pytorch-$mode.csv" "${py[@]}" --steps 60
  {
    echo "## PyTorch $mode, $model ($tps tokens/s without the profiler)"
    python3 scripts/bench/kernel_time_table.py "$out/profile-pytorch-$mode.csv" --step_marker 'adam' --wall_ms "$wall"
  } >"$out/profile-pytorch-$mode-$model.md" 2>&1
  cat "$out/profile-pytorch-$mode-$model.md"
done
rm -f "$out"/profile-*.csv
