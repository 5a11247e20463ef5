#!/usr/bin/env bash
# On one GPU, dsrank from a Hugging Face folder of random weights against
# PyTorch (scripts/bench/pytorch_llama.py: bf16 autocast, fused AdamW, SDPA;
# eager and torch.compile), measured in the same run. Prints tokens/s and
# peak memory. RUNS picks (default both):
#   tinyllama  a TinyLlama-1.1B-shaped full fine-tune (22 layers, width 2048,
#              32 heads, 4 KV heads, FFN 5632, vocabulary 32000), sequence
#              2048, batch 8, bf16, ZeRO-0;
#   lora7b     a Llama-2-7B-shaped LoRA fine-tune (32 layers, width 4096, 32
#              heads, FFN 11008, vocabulary 32000), sequence 2048, batch 4,
#              r=16 alpha 32 on q/k/v/o, the base frozen in bf16.
# MODES picks the measurements (default all): dsrank eager compile.
# DSRANK_OVERRIDES adds dsrank arguments (e.g. "--override model.fused_kernels=false").
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bash "$root/scripts/gpu-build.sh" "$root/.gpu-deps" dsrank >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
export LD_LIBRARY_PATH=/opt/dslaunch-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
bin="$root/build-gpu/bin"
data=${GPU_DATA:-$root/.gpu-data}
steps=${STEPS:-20}

modes=" ${MODES:-dsrank eager compile} "
bench() {  # NAME BATCH "FOLDER SHAPE..." "DSRANK OVERRIDES..." "PYTORCH ARGS..."
  local name=$1 batch=$2 shape=$3 overrides=$4 pytorch=$5
  if [[ $modes == *" dsrank "* ]]; then
  # shellcheck disable=SC2086
  python3 "$root/tests/hf/make_tiny_llama.py" "$out/$name-model" llama2 --dtype bfloat16 $shape || return 1
  # shellcheck disable=SC2086
  "$bin/dsrank" "$root/configs/llama-tiny.cfg" --device cuda --override "model.from=$out/$name-model" \
    --override model.sequence_length=2048 --override "data.prepared=$data/fortunes-byte" --override train.steps=$steps \
    --override train.micro_batch_size=$batch --override train.global_batch_size=$batch --override train.precision=bf16 \
    --override train.eval_interval=0 --override 'checkpoint.dir=""' --override 'export.hf_dir=""' \
    --override train.warmup_steps=2 --override ds_config.zero_optimization.stage=0 \
    --override ds_config.steps_per_print=4 --override ds_config.memory_breakdown=true $overrides ${DSRANK_OVERRIDES:-} \
    >"$out/$name-dsrank.log" 2>&1 ||
    { tail -n 20 "$out/$name-dsrank.log"; return 1; }
  rm -rf "$out/$name-model"
  local tps peak
  tps=$(grep -o 'tokens/s=[0-9]*' "$out/$name-dsrank.log" | tail -1 | cut -d= -f2)
  peak=$(grep -o 'peak GPU memory allocated: [0-9.]*' "$out/$name-dsrank.log" | tail -1 | awk '{print $NF}')
  echo "$name dsrank ZeRO-0 bf16 ${DSRANK_OVERRIDES:-}: tokens/s=$tps peak_gib=$peak"
  grep -m1 'fused CUDA kernels\|model.fused_kernels=false' "$out/$name-dsrank.log"
  grep -m1 'LoRA r=' "$out/$name-dsrank.log"
  grep -m1 'memory: parameters' "$out/$name-dsrank.log"
  fi
  for mode in eager compile; do
    [[ $modes == *" $mode "* ]] || continue
    local flag=()
    [[ $mode == compile ]] && flag=(--compile)
    # shellcheck disable=SC2086
    line=$(python3 "$root/scripts/bench/pytorch_llama.py" "${flag[@]}" --batch "$batch" $pytorch 2>"$out/$name-pytorch-$mode.err" | tail -1)
    echo "$name PyTorch $mode: $line"
  done
}

for run in ${RUNS:-tinyllama lora7b}; do
  case $run in
    tinyllama)
      bench tinyllama 8 "--hidden 2048 --layers 22 --heads 32 --kv_heads 4 --intermediate 5632 --vocab 32000 --max_positions 2048" \
        "" "--layers 22 --width 2048 --heads 32 --kv_heads 4 --ffn 5632 --vocab 32000" ;;
    lora7b)
      bench lora7b 4 "--hidden 4096 --layers 32 --heads 32 --kv_heads 32 --intermediate 11008 --vocab 32000 --max_positions 4096" \
        "--override lora.r=16 --override lora.lora_alpha=32 --override lora.target_modules=[q_proj,k_proj,v_proj,o_proj]" \
        "--layers 32 --width 4096 --heads 32 --kv_heads 32 --ffn 11008 --vocab 32000 --lora 16 --lora_alpha 32" ;;
    *) echo "unknown run $run (tinyllama, lora7b)" >&2; exit 2 ;;
  esac
done
