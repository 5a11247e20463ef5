#!/usr/bin/env bash
# On the GPU host: ZeRO-3 at world size 1.
#  1. the runtime's unit tests on this LibTorch (the ZeRO-3 storage release
#     path included);
#  2. gpt-124m (bf16, sequence 1024, batch 16): tokens/s of ZeRO-0 and ZeRO-3;
#  3. gpt-1.3b (~1.2B parameters, batch 4) with the GPU capped at
#     LIMIT_GB GiB (dsrank --cuda_memory_limit_gb, a stand-in for a smaller
#     card): ZeRO-0 must run out of memory, ZeRO-3 with offload_optimizer and
#     offload_param on the CPU must train; prints its step time and memory.
set -uo pipefail
limit=${LIMIT_GB:-20}
source "$(dirname "$0")/gpu-bench-env.sh"
bash "$root/scripts/gpu-runtime-tests.sh" "$bin" ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} >"$out/runtime_tests.log" 2>&1
echo "runtime tests: exit $?"
grep -E -A8 'Failure|^\[  (PASSED|FAILED)' "$out/runtime_tests.log" | head -n 30
cd "$root"
common=(--override "data.prepared=$data/fortunes-all-byte" --override ds_config.memory_breakdown=true
        --override train.warmup_steps=1)

printf '%-34s %12s %10s\n' "gpt-124m run" "tokens/s" "loss@40"
stages="0 3"
[[ -n ${SKIP_124M:-} ]] && stages=""
for stage in $stages; do
  log="$out/124m-zero$stage.log"
  "$bin/dslaunch" --num_gpus 1 "${common[@]}" --override train.steps=40 --override ds_config.steps_per_print=10 \
    --override ds_config.zero_optimization.stage=$stage configs/gpt-124m.cfg >"$log" 2>&1
  tps=$(grep -o 'step=[234]0 .*tokens/s=[0-9]*' "$log" | sed 's/.*tokens\/s=//' | awk '{s+=$1; n++} END {if (n) printf "%.0f", s/n}')
  loss=$(grep -o 'step=40 loss=[0-9.]*' "$log" | sed 's/.*loss=//')
  printf '%-34s %12s %10s\n' "ZeRO-$stage" "${tps:-FAILED}" "${loss:--}"
  [[ -n $tps ]] || tail -n 5 "$log"
done

echo "gpt-1.3b with the GPU capped at $limit GiB:"
if [[ -z ${SKIP_ZERO0:-} ]]; then
  log="$out/1.3b-zero0.log"
  "$bin/dslaunch" --num_gpus 1 "${common[@]}" --override train.steps=3 configs/gpt-1.3b.cfg \
    --cuda_memory_limit_gb "$limit" >"$log" 2>&1
  echo "  ZeRO-0: exit $? ($(grep -o -i -m1 'out of memory' "$log" || echo 'no out-of-memory error'))"
fi
log="$out/1.3b-zero3-offload.log"
start=$(date +%s)
"$bin/dslaunch" --num_gpus 1 "${common[@]}" --override train.steps=${STEPS_1P3B:-6} --override ds_config.steps_per_print=1 \
  --override ds_config.zero_optimization.stage=3 \
  --override ds_config.zero_optimization.offload_optimizer.device=cpu \
  --override ds_config.zero_optimization.offload_param.device=cpu configs/gpt-1.3b.cfg \
  --cuda_memory_limit_gb "$limit" >"$log" 2>&1
echo "  ZeRO-3 + CPU offload: exit $? after $(( $(date +%s) - start )) s"
grep -E 'GPT with|step=[0-9]+ |memory:|peak GPU|ZeRO-3:' "$log" | sed 's/^/    /' | head -n 40
