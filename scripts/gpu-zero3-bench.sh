#!/usr/bin/env bash
# On the GPU host: ZeRO-3 at world size 1.
#  1. the runtime's unit tests on this LibTorch (the ZeRO-3 storage release
#     path included);
#  2. gpt-124m (bf16, sequence 1024, batch 16): tokens/s of ZeRO-0 and ZeRO-3;
#  3. gpt-1.3b (~1.2B parameters, batch 4) with the GPU capped at
#     LIMIT_GB GiB (dsrank --cuda_memory_limit_gb, a stand-in for a smaller
#     card): ZeRO-0 must run out of memory, ZeRO-3 with offload_optimizer and
#     offload_param on the CPU must train; prints its step time and memory;
#  4. the same with ZeRO-Offload's delayed parameter update (delay_update,
#     Note [Delayed parameter update]): tokens/s of both runs over steps 3..N
#     and their ratio, measured in this run;
#  5. with NVME=1: the same model with the optimizer and the parameters on
#     NVMe (ZeRO-Infinity, Note [Parameters on NVMe]) under NVME_PATH (default
#     nvme-swap/ in the repository), its step time against 3's and the
#     offload breakdown.
# SKIP_TESTS=1 skips 1 (and, with GPU_TARGETS="dsrank dslaunch dsagent",
# building the test binaries); SKIP_124M=1 skips 2; SKIP_ZERO0=1 skips the
# ZeRO-0 out-of-memory run of 3; SKIP_DELAY=1 skips 4.
set -uo pipefail
limit=${LIMIT_GB:-20}
source "$(dirname "$0")/gpu-bench-env.sh"
if [[ -z ${SKIP_TESTS:-} ]]; then
  bash "$root/scripts/gpu-runtime-tests.sh" "$bin" ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} >"$out/runtime_tests.log" 2>&1
  echo "runtime tests: exit $?"
  grep -E -A8 'Failure|^\[  (PASSED|FAILED)' "$out/runtime_tests.log" | head -n 30
fi
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

# 4. The delayed update: the host step of step N beside step N+1's forward and backward.
mean_tps() {  # LOG: mean tokens/s of steps 3 and later
  grep -oE 'step=[0-9]+ .*tokens/s=[0-9]+' "$1" | awk '{split($1, s, "="); if (s[2] >= 3) {sub(/.*tokens\/s=/, ""); t += $0; n++}}
    END {if (n) printf "%.0f", t / n}'
}
log_delay="$out/1.3b-zero3-offload-delay.log"
[[ -n ${SKIP_DELAY:-} ]] || "$bin/dslaunch" --num_gpus 1 "${common[@]}" --override train.steps=${STEPS_1P3B:-6} --override ds_config.steps_per_print=1 \
  --override ds_config.zero_optimization.stage=3 \
  --override ds_config.zero_optimization.offload_optimizer.device=cpu \
  --override ds_config.zero_optimization.offload_optimizer.delay_update=true \
  --override ds_config.zero_optimization.offload_param.device=cpu configs/gpt-1.3b.cfg \
  --cuda_memory_limit_gb "$limit" >"$log_delay" 2>&1
if [[ -z ${SKIP_DELAY:-} ]]; then
  echo "  ZeRO-3 + CPU offload + delay_update: exit $?"
  grep -E 'step=[0-9]+ ' "$log_delay" | sed 's/^/    /' | head -n 12
  plain=$(mean_tps "$log") delayed=$(mean_tps "$log_delay")
  if [[ -n $plain && -n $delayed ]]; then
    awk -v p="$plain" -v d="$delayed" 'BEGIN {printf "  tokens/s over steps 3..: %d without delay, %d with delay_update: %.2fx\n", p, d, d / p}'
  else
    echo "  tokens/s: a run printed none (plain '${plain}', delayed '${delayed}')"
  fi
fi

# 5. ZeRO-Infinity: the optimizer and the parameters on NVMe.
if [[ -n ${NVME:-} ]]; then
  nvme=${NVME_PATH:-$root/nvme-swap}
  mkdir -p "$nvme"
  log_nvme="$out/1.3b-zero3-nvme.log"
  start=$(date +%s)
  "$bin/dslaunch" --num_gpus 1 "${common[@]}" --override train.steps=${STEPS_1P3B:-6} --override ds_config.steps_per_print=1 \
    --override ds_config.zero_optimization.stage=3 --override ds_config.wall_clock_breakdown=true \
    --override ds_config.zero_optimization.offload_optimizer.device=nvme \
    --override "ds_config.zero_optimization.offload_optimizer.nvme_path=$nvme" \
    --override ds_config.zero_optimization.offload_param.device=nvme \
    --override "ds_config.zero_optimization.offload_param.nvme_path=$nvme" configs/gpt-1.3b.cfg \
    --cuda_memory_limit_gb "$limit" >"$log_nvme" 2>&1
  echo "  ZeRO-3 + NVMe offload of optimizer and parameters: exit $? after $(( $(date +%s) - start )) s"
  grep -E 'dsrank: (NVMe|nvme_path)|step=[0-9]+ |memory:|NVMe offload:|peak GPU|offload:|ZeRO-3:' "$log_nvme" |
    sed 's/^/    /' | cut -c1-400 | head -n 40
  plain=$(mean_tps "$log") on_nvme=$(mean_tps "$log_nvme")
  if [[ -n $plain && -n $on_nvme ]]; then
    awk -v p="$plain" -v d="$on_nvme" 'BEGIN {printf "  tokens/s over steps 3..: %d with CPU offload, %d with NVMe offload: %.3fx\n", p, d, d / p}'
  fi
  rm -rf "$nvme"
fi
