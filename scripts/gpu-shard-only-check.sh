#!/usr/bin/env bash
# On one GPU: shard-only loading at ZeRO-3 (Note [Shard-only loading] in
# runtime/model/deferred_parameters.h) with the host's LibTorch and CUDA.
#  1. The deferred-parameter tests (CPU/Gloo, built against this LibTorch).
#  2. A TinyLlama-shaped folder (1.1B parameters, bf16) fine-tuned for STEPS
#     steps at ZeRO-0 (the model built whole, then moved to the GPU) and at
#     ZeRO-3 (built deferred, each unit filled on the GPU from the folder's
#     mapping): the same losses to bf16 precision, and each run's peak host
#     memory when its engine was ready, throughput and peak GPU memory.
# Needs .gpu-deps (scripts/gpu-deps-bundle.sh) and .gpu-data/fortunes-byte
# (dsprep of the fortunes, as for gpu-smoke.sh). Writes to $OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
steps=${STEPS:-6}
bash "$root/scripts/gpu-build.sh" "$root/.gpu-deps" dsrank engine_tests hf_tests zero_tests tensor_parallel_tests \
  >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
export LD_LIBRARY_PATH=/opt/dslaunch-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
bin="$root/build-gpu/bin"
status=0
"$bin/zero_tests" --gtest_filter='DeferredPartition*' 2>&1 | tail -n 2 || status=1
"$bin/hf_tests" --gtest_filter='HfParameterSource*' 2>&1 | tail -n 2 || status=1
"$bin/engine_tests" --gtest_filter='ShardOnlyLoading*' 2>&1 | grep -E 'worst|PASSED|FAILED' || status=1
"$bin/tensor_parallel_tests" --gtest_filter='*SliceRows*' 2>&1 | tail -n 2 || status=1

python3 "$root/tests/hf/make_tiny_llama.py" "$out/tinyllama" llama2 --dtype bfloat16 --hidden 2048 --layers 22 \
  --heads 32 --kv_heads 4 --intermediate 5632 --vocab 32000 --max_positions 2048 || exit 1
for stage in 0 3; do
  "$bin/dsrank" "$root/configs/llama-tiny.cfg" --device cuda --override "model.from=$out/tinyllama" \
    --override model.sequence_length=2048 --override "data.prepared=$root/.gpu-data/fortunes-byte" \
    --override train.steps="$steps" --override train.micro_batch_size=8 --override train.global_batch_size=8 \
    --override train.precision=bf16 --override train.eval_interval=0 --override 'checkpoint.dir=""' \
    --override 'export.hf_dir=""' --override train.warmup_steps=2 --override ds_config.zero_optimization.stage=$stage \
    --override ds_config.zero_optimization.stage3_param_persistence_threshold=0 --override ds_config.steps_per_print=2 --override ds_config.memory_breakdown=true \
    --loss_log "$out/z$stage.tsv" >"$out/z$stage.log" 2>&1 || { tail -n 20 "$out/z$stage.log"; exit 1; }
  echo "ZeRO-$stage:"
  grep -E 'engine ready|read [0-9]+ of the|each rank reads only' "$out/z$stage.log"
  grep -o 'tokens/s=[0-9]*' "$out/z$stage.log" | tail -1
  grep -o 'peak GPU memory allocated: [0-9.]* GiB' "$out/z$stage.log" | tail -1
done
paste "$out/z0.tsv" "$out/z3.tsv" | awk '
  { d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r; printf "step %d: ZeRO-0 %.5f ZeRO-3 %.5f\n", $1, $2, $4 }
  END { printf "worst relative loss difference %.2e over %d steps\n", worst, NR; exit worst > 2e-2 || NR == 0 }' || status=1
rm -rf "$out/tinyllama"
exit $status
