#!/usr/bin/env bash
# On a GPU host, one command: GPT throughput through dslaunch against the same
# model and batch trained by PyTorch on the same GPU, in the same run.
#   bash scripts/gpu-throughput-bench.sh
# Models (sequence 1024, bf16, batch 16, GPT-2's padded vocabulary 50304):
#   124m: 12 layers, width 768;  350m: 24 x 1024;  1.3b: 24 x 2048.
# dslaunch runs (world size 1): ZeRO 0, 1, 2, 3, stage 2 with CPU offload, and
# ZeRO-0 with model.fused_kernels=false (LibTorch's LayerNorm/GELU/loss);
# RUNS may add 2-nvme (stage 2 with the optimizer offloaded to NVMe), and any
# run with the suffix -gas4 (4 micro-batches per step: the goal of ZeRO-Offload
# is measured at accumulation 1 and 4, e.g. RUNS="2 2-offload 2-gas4 2-offload-gas4");
# -offload-delay turns on the delayed parameter update (2-offload-delay-gas4);
# 3-offload offloads ZeRO-3's parameters and optimizer both.
# PyTorch runs (scripts/bench/pytorch_gpt.py): eager and torch.compile.
# For each: tokens/s (mean over the steps after the first window), model FLOP
# utilisation against 989 TFLOP/s (H200 datasheet, dense bf16) and against
# the 8192^3 bf16 matmul ceiling measured here, and peak GPU memory; then the
# ratio of dslaunch ZeRO-0 to PyTorch. FLOPs per token: 6N + 12·L·d·T.
# Environment: MODELS, RUNS, PYTORCH (subsets of the lists above; PYTORCH=
# empty for none), STEPS.
# Results: $OUT/throughput.md (or gpu-out/), logs beside it.
set -uo pipefail
source "$(dirname "$0")/gpu-bench-env.sh"
cd "$root"
models=${MODELS:-"124m 350m 1.3b"}
runs=${RUNS:-"0 1 2 3 2-offload 0-unfused"}
pytorch_modes=${PYTORCH-"eager compile"}
steps=${STEPS:-30}
ceiling=$(python3 scripts/bench/matmul_ceiling.py)
table="$out/throughput.md"
{
  echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1); bf16 matmul ceiling ${ceiling} TFLOP/s (8192^3, measured now)"
  echo
  echo "| model | run | tokens/s | MFU (989) | MFU (ceiling) | peak GiB |"
  echo "|---|---|---|---|---|---|"
} | tee "$table"

row() {  # model run tokens/s peak flops_per_token
  if [[ -z $3 ]]; then
    echo "| $1 | $2 | FAILED | | | |" | tee -a "$table"
    return
  fi
  awk -v m="$1" -v r="$2" -v t="$3" -v p="$4" -v f="$5" -v c="$ceiling" 'BEGIN {
    printf "| %s | %s | %.0f | %.1f%% | %.1f%% | %s |\n", m, r, t, 100 * t * f / 989e12, 100 * t * f / (c * 1e12), p }' |
    tee -a "$table"
}

declare -A tokens
for model in $models; do
  case $model in
    124m) shape=(12 12 768) ;;
    350m) shape=(24 16 1024) ;;
    1.3b) shape=(24 16 2048) ;;
    *) echo "unknown model $model (124m, 350m, 1.3b)"; exit 2 ;;
  esac
  layers=${shape[0]} heads=${shape[1]} width=${shape[2]} seq=1024 vocab=50304
  flops=$(awk -v L=$layers -v d=$width -v T=$seq -v V=$vocab 'BEGIN {
    N = V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d; printf "%.0f", 6 * N + 12 * L * d * T }')
  for run in $runs; do
    stage=${run%%-*} extra=() run_steps=$steps print=10 accumulation=() delay=()
    [[ $run == *-gas4 ]] && accumulation=(--override ds_config.gradient_accumulation_steps=4)
    # Note [Delayed parameter update]: the host step beside the next forward
    # and backward (after -offload: 2-offload-delay, 2-offload-delay-gas4).
    [[ $run == *-delay* ]] && delay=(--override ds_config.zero_optimization.offload_optimizer.delay_update=true)
    base=${run%-gas4}
    case ${base%-delay} in
      # With the offload breakdown (Note [Offload breakdown]): gradients down,
      # host step, parameters up.
      *-offload) extra=(--override ds_config.zero_optimization.offload_optimizer.device=cpu
                        --override ds_config.wall_clock_breakdown=true)
                 # 3-offload: ZeRO-3 with the parameter shard on the host too.
                 [[ $stage == 3 ]] && extra+=(--override ds_config.zero_optimization.offload_param.device=cpu)
                 run_steps=12 print=4 ;;  # the host Adam makes these steps long
      # Note [NVMe offload]: swap files under NVME_PATH (a folder on the
      # host's drive, not tmpfs), 100M-element sub-groups.
      *-nvme) mkdir -p "${NVME_PATH:-$root/nvme-swap}"
              extra=(--override ds_config.zero_optimization.offload_optimizer.device=nvme
                     --override "ds_config.zero_optimization.offload_optimizer.nvme_path=${NVME_PATH:-$root/nvme-swap}"
                     --override ds_config.zero_optimization.sub_group_size=100000000
                     --override ds_config.wall_clock_breakdown=true --override train.warmup_steps=2)
              run_steps=8 print=4 ;;  # each step streams 12 bytes per parameter through the drive twice
      *-unfused) extra=(--override model.fused_kernels=false) ;;
    esac
    log="$out/$model-zero$run.log"
    "$bin/dslaunch" --num_gpus 1 --override "data.prepared=$data/fortunes-all-byte" \
      --override model.layers=$layers --override model.heads=$heads --override model.width=$width \
      --override model.vocab_size=$vocab --override train.micro_batch_size=16 \
      --override train.steps=$run_steps --override ds_config.steps_per_print=$print \
      --override ds_config.memory_breakdown=true --override ds_config.zero_optimization.stage=$stage \
      "${extra[@]}" "${delay[@]}" "${accumulation[@]}" configs/gpt-124m.cfg >"$log" 2>&1
    # Every window after the first (which holds start-up and warm-up).
    tps=$(grep -o 'step=[0-9]* .*tokens/s=[0-9]*' "$log" | tail -n +2 | sed 's/.*tokens\/s=//' |
      awk '{s += $1; n++} END {if (n) printf "%.0f", s / n}')
    peak=$(grep -o 'peak GPU memory allocated: [0-9.]*' "$log" | tail -n 1 | awk '{print $NF}')
    [[ -n $tps ]] || tail -n 5 "$log"
    tokens["$model/$run"]=$tps
    row "$model" "dslaunch ZeRO-$run" "$tps" "$peak" "$flops"
  done
  for mode in $pytorch_modes; do
    log="$out/$model-pytorch-$mode.log"
    flag=()
    [[ $mode == compile ]] && flag=(--compile)
    python3 scripts/bench/pytorch_gpt.py --layers $layers --heads $heads --width $width --vocab $vocab \
      --batch 16 --steps $steps "${flag[@]}" >"$log" 2>&1
    tps=$(grep -o 'tokens_per_s=[0-9]*' "$log" | tail -n 1 | cut -d= -f2)
    peak=$(grep -o 'peak_gib=[0-9.]*' "$log" | tail -n 1 | cut -d= -f2)
    [[ -n $tps ]] || tail -n 5 "$log"
    tokens["$model/pytorch-$mode"]=$tps
    row "$model" "PyTorch $mode" "$tps" "$peak" "$flops"
  done
done
echo | tee -a "$table"
for model in $models; do
  ours=${tokens["$model/0"]:-}
  for mode in $pytorch_modes; do
    theirs=${tokens["$model/pytorch-$mode"]:-}
    [[ -n $ours && -n $theirs ]] &&
      awk -v m="$model" -v a="$ours" -v b="$theirs" -v k="$mode" \
        'BEGIN { printf "%s: dslaunch ZeRO-0 / PyTorch %s = %.2f\n", m, k, a / b }' | tee -a "$table"
  done
done
