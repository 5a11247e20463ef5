#!/usr/bin/env bash
# Mixture-of-experts throughput on one GPU (issue 18; the multi-GPU points by
# the validation issue): a ~1B-parameter GPT-MoE (24 blocks of width 1024,
# every second block 8 GELU experts, top-2, capacity factor 1.25) trained by
# dsrank in bf16, against, in the same run, (a) the dense GPT of the same
# shape and (b) the same-active-parameter model: 2 experts, top-2, dropless
# (every token through both experts: the MoE's active compute with no
# sparsity). Tokens/s and peak memory per point; the ratios are the figures.
# Then dropless top-2 at 8 and 4 experts with the wall-clock breakdown (how
# the cost grows with the number of experts).
# With G > 1 GPUs the MoE also runs at ep G (expert-parallel exchange).
#   bash scripts/gpu-moe-bench.sh
#   STEPS=20 BATCH=8 bash scripts/gpu-moe-bench.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bash "$root/scripts/gpu-build.sh" "$root/.gpu-deps" dsrank dslaunch dsagent >"$out/build.log" 2>&1 ||
  { tail -n 30 "$out/build.log"; exit 1; }
export LD_LIBRARY_PATH=/opt/dslaunch-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
bin="$root/build-gpu/bin"
data=${GPU_DATA:-$root/.gpu-data}
steps=${STEPS:-12}
batch=${BATCH:-8}
gpus=$(nvidia-smi -L | wc -l)

run() {  # NAME GPUS [overrides...]
  local name=$1 n=$2
  shift 2
  local log="$out/moe-$name.log"
  "$bin/dslaunch" --num_gpus "$n" "$root/configs/gpt-tiny.cfg" --override model.layers=24 --override model.width=1024 \
    --override model.heads=16 --override model.sequence_length=1024 --override "data.prepared=$data/fortunes-all-byte" \
    --override train.steps="$steps" --override train.micro_batch_size="$batch" \
    --override train.global_batch_size=$((batch * n)) --override train.precision=bf16 --override train.eval_interval=0 \
    --override 'checkpoint.dir=""' --override train.warmup_steps=2 --override ds_config.zero_optimization.stage=1 \
    --override ds_config.steps_per_print=4 --override ds_config.memory_breakdown=true "$@" >"$log" 2>&1
  local code=$?
  if ((code != 0)); then
    echo "$name: failed (exit $code): $(grep -v '^\s*$' "$log" | tail -1)"
    return
  fi
  local tps peak params
  tps=$(grep -o 'tokens/s=[0-9]*' "$log" | tail -1 | cut -d= -f2)
  peak=$(grep -o 'peak GPU memory allocated: [0-9.]*' "$log" | tail -1 | awk '{print $NF}')
  params=$(grep -o '[0-9,]* parameters' "$log" | head -1)
  echo "$name ($n GPU): tokens/s=$tps peak_gib=$peak $params"
  grep -m2 '^  moe ' "$log" | sed "s/^/  $name: /"
}

moe=(--override model.moe.num_experts=8 --override model.moe.top_k=2 --override model.moe.every=2
  --override model.moe.capacity_factor=1.25 --override model.moe.telemetry=true)
run dense 1
run moe8-top2 1 "${moe[@]}"
run moe8-top1-rts-jitter 1 --override model.moe.num_experts=8 --override model.moe.top_k=1 --override model.moe.every=2 \
  --override model.moe.noisy_gate_policy=Jitter --override model.moe.telemetry=true
run same-active 1 --override model.moe.num_experts=2 --override model.moe.top_k=2 --override model.moe.every=2 \
  --override model.moe.drop_tokens=false
# Where the time goes: dropless top-2 at 8, 4 and 2 experts (the last is
# same-active above), with the wall-clock breakdown of forward+backward
# against the optimizer step.
for e in 8 4; do
  run "dropless-$e-top2" 1 --override model.moe.num_experts="$e" --override model.moe.top_k=2 \
    --override model.moe.every=2 --override model.moe.drop_tokens=false --override ds_config.wall_clock_breakdown=true
  grep 'wall clock' "$out/moe-dropless-$e-top2.log" | tail -1 | sed 's/^\[[^]]*\] //'
done
if ((gpus > 1)); then
  run "moe8-top2-ep$gpus" "$gpus" "${moe[@]}" --override ds_config.moe_expert_parallel_size="$gpus" \
    --override ds_config.wall_clock_breakdown=true
fi
