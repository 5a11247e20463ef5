#!/usr/bin/env bash
# On a GPU host: fp16 training (dynamic loss scaling) of the model families
# that had only run in fp32/bf16, each against its own fp32 run on the same
# GPU and data:
#   llama  a Llama-family folder (tests/hf/make_tiny_llama.py llama3_gqa,
#          4 layers, hidden 256) trained from random weights;
#   moe    gpt-tiny with 4 experts, top-2, every second block;
#   lora   the same Llama with LoRA r 8 (dropout 0.1) on q/k/v/o, every layer
#          recomputed (the dropout streams' recomputation on CUDA).
# Each run prints its per-step losses' largest relative distance from fp32
# (large where the loss falls fast: the steps the loss scaler skips while it
# finds its scale shift fp16's curve) and the steps skipped; it fails when
# the last loss is more than 3% from fp32's, more than a tenth of the steps
# were skipped, or any loss is not finite. Then the dropout-stream and
# GPT checkpointing tests on CUDA: model_tests whole.
# Needs .gpu-data/fortunes-byte (dsprep of the fortunes, as for gpu-smoke.sh).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bash "$root/scripts/gpu-build.sh" "$root/.gpu-deps" dsrank model_tests >"$out/build.log" 2>&1 ||
  { tail -n 30 "$out/build.log"; exit 1; }
export LD_LIBRARY_PATH=/opt/dslaunch-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
bin="$root/build-gpu/bin"
data=${GPU_DATA:-$root/.gpu-data}
steps=${STEPS:-60}
status=0

python3 "$root/tests/hf/make_tiny_llama.py" "$out/llama" llama3_gqa --dtype float32 --seed 5 \
  --hidden 256 --layers 4 --heads 8 --kv_heads 2 --intermediate 688 --vocab 512 --max_positions 256 ||
  { echo "make_tiny_llama failed"; exit 1; }

run() {  # NAME CONFIG PRECISION [overrides...]
  local name=$1 config=$2 precision=$3
  shift 3
  rm -f "$out/$name-$precision.tsv"  # the loss log appends
  "$bin/dsrank" "$root/configs/$config" --device "${DEVICE:-cuda}" --override "data.prepared=$data/fortunes-byte" \
    --override train.steps="$steps" --override train.precision="$precision" --override train.eval_interval=0 \
    --override 'checkpoint.dir=""' --override 'export.hf_dir=""' --override 'export.adapter_dir=""' \
    --override train.micro_batch_size=8 --override train.global_batch_size=8 --override ds_config.steps_per_print=20 \
    --override train.warmup_steps=4 \
    --loss_log "$out/$name-$precision.tsv" "$@" >"$out/$name-$precision.log" 2>&1 ||
    { echo "$name $precision failed:"; tail -n 15 "$out/$name-$precision.log"; return 1; }
}

compare() {  # NAME
  local name=$1
  local skipped
  skipped=$(grep -o 'done: [0-9]* step(s), [0-9]* skipped' "$out/$name-fp16.log" | awk '{print $4}')
  paste "$out/$name-fp32.tsv" "$out/$name-fp16.tsv" | awk -v name="$name" -v skipped="${skipped:-missing}" '
    NR == 1 { first32 = $2; first16 = $4 }
    { if ($4 != $4 + 0 || $4 == "nan" || $4 == "inf") bad = 1
      d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r; last32 = $2; last16 = $4; n++ }
    END {
      end = last16 - last32; if (end < 0) end = -end
      ok = !bad && n > 0 && skipped != "missing" && skipped <= 0.1 * n && end <= 0.03 * last32
      printf "%s fp16 vs fp32 over %d steps: loss %.4f -> %.4f (fp32 %.4f -> %.4f), worst step distance %.2e, "\
             "last %.2e, %s step(s) skipped by the loss scaler: %s\n", name, n, first16, last16, first32, last32,
             worst, end / last32, skipped, ok ? "ok" : "FAIL"
      exit !ok }' || status=1
}

LLAMA=(--override "model.from=$out/llama" --override model.sequence_length=128 --override train.lr=1e-3)
MOE=(--override model.moe.num_experts=4 --override model.moe.top_k=2 --override model.moe.every=2
  --override model.sequence_length=128)
LORA=("${LLAMA[@]}" --override lora.r=8 --override lora.lora_alpha=16 --override lora.lora_dropout=0.1
  --override 'lora.target_modules=[q_proj,k_proj,v_proj,o_proj]' --override ds_config.activation_checkpointing.number_checkpoints=4)
for precision in fp32 fp16; do
  run llama llama-tiny.cfg $precision "${LLAMA[@]}" || status=1
  run moe gpt-tiny.cfg $precision "${MOE[@]}" || status=1
  run lora llama-tiny.cfg $precision "${LORA[@]}" || status=1
done
for name in llama moe lora; do
  [[ -s $out/$name-fp32.tsv && -s $out/$name-fp16.tsv ]] && compare $name
done
for name in llama moe lora; do
  echo "$name fp16: $(grep -o 'loss_scale=[0-9.]*' "$out/$name-fp16.log" | tail -n 1) at the last printed step"
done

# MODEL_TESTS: a gtest filter (default all).
"$bin/model_tests" --gtest_filter="${MODEL_TESTS:-*}" >"$out/model_tests.log" 2>&1 ||
  { status=1; grep -E '^\[ RUN|^\[  FAILED' "$out/model_tests.log" | tail -n 4; tail -n 30 "$out/model_tests.log"; }
grep -E '^\[  (PASSED|FAILED)' "$out/model_tests.log" | head
exit $status
