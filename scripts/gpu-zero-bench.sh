#!/usr/bin/env bash
# On the GPU host: gpt-124m (bf16, sequence 1024, batch 16) at world size 1
# with ZeRO stages 0, 1, 2 and stage 2 with CPU offload, through dslaunch and
# NCCL; prints tokens/s for each (the mean over steps 20-40) and the loss at 40.
set -uo pipefail
source "$(dirname "$0")/gpu-bench-env.sh"
bash "$root/scripts/gpu-runtime-tests.sh" "$bin" 2>&1 | grep -E -A8 'Failure|^\[  (PASSED|FAILED)' | head -n 30
cd "$root"
printf '%-22s %12s %10s\n' "run" "tokens/s" "loss@40"
# Last field: blocks recomputed by activation checkpointing (0: none).
for run in "0 none 0" "1 none 0" "2 none 0" "2 cpu 0" "2 none 12"; do
  set -- $run
  log="$out/zero$1-$2-ac$3.log"
  ac=()
  (($3 > 0)) && ac=(--override ds_config.activation_checkpointing.number_checkpoints=$3)
  "$bin/dslaunch" --num_gpus 1 --override "data.prepared=$data/fortunes-all-byte" \
    --override train.steps=40 --override ds_config.steps_per_print=10 \
    --override ds_config.zero_optimization.stage=$1 \
    "${ac[@]}" \
    --override ds_config.zero_optimization.offload_optimizer.device=$2 configs/gpt-124m.cfg >"$log" 2>&1
  tps=$(grep -o 'step=[234]0 .*tokens/s=[0-9]*' "$log" | sed 's/.*tokens\/s=//' | awk '{s+=$1; n++} END {if (n) printf "%.0f", s/n}')
  loss=$(grep -o 'step=40 loss=[0-9.]*' "$log" | sed 's/.*loss=//')
  printf '%-22s %12s %10s\n' "ZeRO-$1 offload=$2 ac=$3" "${tps:-FAILED}" "${loss:--}"
  [[ -n $tps ]] || tail -n 5 "$log"
done
