#!/usr/bin/env bash
# Tensor-parallel throughput on one host of G GPUs (issue 16; run by the
# multi-GPU validation issue when such a host is lent): Llama shapes of ~1.3B
# and ~7B parameters, random bf16 weights from a Hugging Face folder, sequence
# 2048, trained by dsrank at TP 1, 2, 4, 8 (up to G; data parallel 1, ZeRO-0,
# sequence parallel on for TP > 1), tokens/s and peak memory per point, in the
# same run. Then the collective TP runs most (the all-reduce / reduce-scatter
# of one layer's activations, batch x 2048 x hidden bf16) against nccl-tests-
# style bus bandwidth measured by dscomm_bench at the same sizes.
#   bash scripts/gpu-tp-bench.sh            # every shape, TP up to the GPUs there are
#   SHAPES=1.3b MAX_TP=4 STEPS=20 bash scripts/gpu-tp-bench.sh
# A point that does not fit (7B at TP 1: 16 bytes per parameter of training
# state alone exceed one H200) is reported as failed with the log's last line.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bash "$root/scripts/gpu-build.sh" "$root/.gpu-deps" dsrank dslaunch dsagent dscomm_bench >"$out/build.log" 2>&1 ||
  { tail -n 30 "$out/build.log"; exit 1; }
export LD_LIBRARY_PATH=/opt/dslaunch-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
bin="$root/build-gpu/bin"
data=${GPU_DATA:-$root/.gpu-data}
steps=${STEPS:-12}
gpus=$(nvidia-smi -L | wc -l)
max_tp=${MAX_TP:-$gpus}
batch=${BATCH:-4}

shape_of() {  # NAME -> "make_tiny_llama.py shape arguments|hidden"
  case $1 in
    1.3b) echo "--hidden 2048 --layers 24 --heads 16 --kv_heads 16 --intermediate 5504 --vocab 32000 --max_positions 2048|2048" ;;
    7b) echo "--hidden 4096 --layers 32 --heads 32 --kv_heads 32 --intermediate 11008 --vocab 32000 --max_positions 4096|4096" ;;
    *) echo "unknown shape $1 (1.3b, 7b)" >&2; return 2 ;;
  esac
}

for shape in ${SHAPES:-1.3b 7b}; do
  spec=$(shape_of "$shape") || exit 2
  # shellcheck disable=SC2086
  python3 "$root/tests/hf/make_tiny_llama.py" "$out/tp-$shape-model" llama2 --dtype bfloat16 ${spec%|*} || exit 1
  for tp in 1 2 4 8; do
    ((tp <= max_tp)) || continue
    log="$out/tp-$shape-tp$tp.log"
    "$bin/dslaunch" --num_gpus "$tp" "$root/configs/llama-tiny.cfg" --override "model.from=$out/tp-$shape-model" \
      --override model.sequence_length=2048 --override "data.prepared=$data/fortunes-byte" --override train.steps="$steps" \
      --override train.micro_batch_size="$batch" --override train.global_batch_size="$batch" --override train.precision=bf16 \
      --override train.eval_interval=0 --override 'checkpoint.dir=""' --override 'export.hf_dir=""' \
      --override train.warmup_steps=2 --override ds_config.zero_optimization.stage=0 \
      --override ds_config.tensor_parallel.tp_size="$tp" --override model.sequence_parallel=$([[ $tp -gt 1 ]] && echo true || echo false) \
      --override ds_config.steps_per_print=4 --override ds_config.memory_breakdown=true >"$log" 2>&1
    code=$?
    if ((code != 0)); then
      echo "$shape TP $tp: failed (exit $code): $(grep -v '^\s*$' "$log" | tail -1)"
      continue
    fi
    tps=$(grep -o 'tokens/s=[0-9]*' "$log" | tail -1 | cut -d= -f2)
    peak=$(grep -o 'peak GPU memory allocated: [0-9.]*' "$log" | tail -1 | awk '{print $NF}')
    echo "$shape TP $tp: tokens/s=$tps (per GPU $((tps / tp))) peak_gib=$peak"
  done
  rm -rf "$out/tp-$shape-model"
  # One layer's activations in bf16: what each TP all-reduce / reduce-scatter moves.
  bytes=$((batch * 2048 * ${spec#*|} * 2))
  for tp in 2 4 8; do
    ((tp <= max_tp)) || continue
    "$bin/dslaunch" --num_gpus "$tp" "$bin/dscomm_bench" --dtype bfloat16 --min_bytes "$bytes" --max_bytes "$bytes" \
      >"$out/tp-$shape-comm$tp.log" 2>&1 || { echo "$shape comm TP $tp: failed"; continue; }
    echo "$shape collectives over $tp GPUs at $bytes bytes:"
    sed 's/^\[[^]]*\] //' "$out/tp-$shape-comm$tp.log" | grep -i 'busbw\|all_reduce\|reduce_scatter\|all_gather' | head -8
  done
done
