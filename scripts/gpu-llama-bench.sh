#!/usr/bin/env bash
# On one GPU: a TinyLlama-1.1B-shaped full fine-tune (22 layers, width 2048,
# 32 heads, 4 KV heads, FFN 5632, vocabulary 32000), sequence 2048, batch 8,
# bf16: dsrank from a Hugging Face folder of random weights against PyTorch
# (scripts/bench/pytorch_llama.py: bf16 autocast, fused AdamW, SDPA; eager and
# torch.compile), measured in the same run. Prints tokens/s and peak memory.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bash "$root/scripts/gpu-build.sh" "$root/.gpu-deps" dsrank >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
export LD_LIBRARY_PATH=/opt/dslaunch-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
bin="$root/build-gpu/bin"
data=${GPU_DATA:-$root/.gpu-data}
shape=(--hidden 2048 --layers 22 --heads 32 --kv_heads 4 --intermediate 5632 --vocab 32000 --max_positions 2048)
python3 "$root/tests/hf/make_tiny_llama.py" "$out/tinyllama" llama2 --dtype bfloat16 "${shape[@]}" || exit 1
steps=${STEPS:-20}
"$bin/dsrank" "$root/configs/llama-tiny.cfg" --device cuda --override "model.from=$out/tinyllama" \
  --override model.sequence_length=2048 --override "data.prepared=$data/fortunes-byte" --override train.steps=$steps \
  --override train.micro_batch_size=8 --override train.global_batch_size=8 --override train.precision=bf16 \
  --override train.eval_interval=0 --override 'checkpoint.dir=""' --override 'export.hf_dir=""' \
  --override train.warmup_steps=2 --override ds_config.zero_optimization.stage=0 \
  --override ds_config.steps_per_print=4 --override ds_config.memory_breakdown=true >"$out/dsrank.log" 2>&1 ||
  { tail -n 20 "$out/dsrank.log"; exit 1; }
dsrank_tps=$(grep -o 'tokens/s=[0-9]*' "$out/dsrank.log" | tail -1 | cut -d= -f2)
dsrank_peak=$(grep -o 'peak GPU memory allocated: [0-9.]*' "$out/dsrank.log" | tail -1 | awk '{print $NF}')
echo "dsrank ZeRO-0 bf16: tokens/s=$dsrank_tps peak_gib=$dsrank_peak"
for mode in eager compile; do
  flag=()
  [[ $mode == compile ]] && flag=(--compile)
  line=$(python3 "$root/scripts/bench/pytorch_llama.py" "${flag[@]}" 2>"$out/pytorch-$mode.err" | tail -1)
  echo "PyTorch $mode: $line"
done
