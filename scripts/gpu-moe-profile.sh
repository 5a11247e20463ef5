#!/usr/bin/env bash
# On a GPU host: where a mixture-of-experts step's GPU time goes (issue 18:
# dropless top-2 costs about 2.6 ms more per expert per MoE layer than the
# same-active model, and the wall-clock breakdown alone does not say why).
# The gpu-moe-bench.sh model (24 blocks of width 1024, every second block
# MoE, bf16, batch BATCH x 1024) with E experts top-2 (dropless, or CAPACITY), for each E in
# EXPERTS: a run without the profiler for the step's wall time, then Nsight
# Compute over a window of launches after warm-up, tabled per kernel by
# scripts/bench/kernel_time_table.py (one whole step). The table's kernel sum
# against the wall time says whether the GPU computes or waits.
#   EXPERTS="8 2" bash scripts/gpu-moe-profile.sh
# ROW_MULTIPLES (default "1 128"): model.moe.expert_row_multiple values to
# compare in the same run (Note [Expert row buckets]); NCU=0: wall times only;
# CAPACITY=1.25: drop tokens over that capacity factor instead of dropless;
# TELEMETRY (default "false"): model.moe.telemetry values to compare in the
# same run, e.g. TELEMETRY="false true".
# Results: $OUT/profile-moe-E-rM[-cC][-tT].md (or gpu-out/).
set -uo pipefail
GPU_TARGETS=${GPU_TARGETS:-dsrank}
source "$(dirname "$0")/gpu-bench-env.sh"
cd "$root"
batch=${BATCH:-8}
for e in ${EXPERTS:-8 2}; do
for m in ${ROW_MULTIPLES:-1 128}; do
for telemetry in ${TELEMETRY:-false}; do
  name="$e-r$m${CAPACITY:+-c$CAPACITY}-t$telemetry"
  routing_label=dropless
  [[ -n "${CAPACITY:-}" ]] && routing_label="capacity $CAPACITY"
  routing=(--override model.moe.drop_tokens=false)
  [[ -n "${CAPACITY:-}" ]] && routing=(--override model.moe.drop_tokens=true --override model.moe.capacity_factor="$CAPACITY")
  args=(configs/gpt-tiny.cfg --device cuda --override model.layers=24 --override model.width=1024
    --override model.heads=16 --override model.sequence_length=1024 --override "data.prepared=$data/fortunes-all-byte"
    --override train.micro_batch_size="$batch" --override train.global_batch_size="$batch"
    --override train.precision=bf16 --override train.eval_interval=0 --override 'checkpoint.dir=""'
    --override train.warmup_steps=2 --override ds_config.zero_optimization.stage=1 --override ds_config.steps_per_print=4
    --override model.moe.num_experts="$e" --override model.moe.top_k=2 --override model.moe.every=2
    "${routing[@]}" --override model.moe.expert_row_multiple="$m" --override model.moe.telemetry="$telemetry")
  "$bin/dsrank" "${args[@]}" --override train.steps=16 --override ds_config.wall_clock_breakdown=true \
    >"$out/profile-moe-$name-wall.log" 2>&1 || { tail -5 "$out/profile-moe-$name-wall.log"; continue; }
  tps=$(grep -o 'tokens/s=[0-9]*' "$out/profile-moe-$name-wall.log" | tail -1 | cut -d= -f2)
  wall=$(awk -v t="${tps:-0}" -v b="$batch" 'BEGIN { if (t > 0) printf "%.3f", b * 1024 / t * 1000; else print 0 }')
  if [[ "${NCU:-1}" == 0 ]]; then
    echo "dsrank MoE, $e experts top-2 $routing_label, expert_row_multiple $m, telemetry $telemetry: $tps tokens/s, $wall ms/step; $(grep 'wall clock' "$out/profile-moe-$name-wall.log" | tail -1)"
    continue
  fi
  timeout "${NCU_TIMEOUT:-240}" ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --launch-skip "${SKIP:-20000}" --launch-count "${COUNT:-12000}" "$bin/dsrank" "${args[@]}" --override train.steps=40 \
    >"$out/profile-moe-$name.csv" 2>"$out/profile-moe-$name.csv.err"
  {
    echo "## dsrank MoE, $e experts top-2 $routing_label, expert_row_multiple $m, bf16, batch $batch x 1024 ($tps tokens/s, $wall ms/step without the profiler)"
    grep 'wall clock' "$out/profile-moe-$name-wall.log" | tail -1
    python3 scripts/bench/kernel_time_table.py "$out/profile-moe-$name.csv" --wall_ms "$wall" --top 30
  } >"$out/profile-moe-$name.md" 2>&1
  cat "$out/profile-moe-$name.md"
done
done
done
