#!/usr/bin/env bash
# On a GPU host: where a batch-1 decode step of the generation engine goes
# (Llama-2-7B shape, bf16, random weights, the fused kernels, CUDA graphs).
#   1. cuda_decode_linear_variants: the step's products through shapes of the
#      decode kernel, in a stream and from a graph, against a read of the
#      same bytes and a copy (the kernel's design bench).
#   2. generation_bench's batch-1 decode: tokens/s, and per token the wall
#      time of the forward and of choosing the token on the host.
#   3. The same decode steps under Nsight Compute (--profile_decode: only the
#      timed graphed steps), each kernel's time tabled for one step by
#      scripts/bench/kernel_time_table.py. Nsight Compute runs each kernel
#      alone with the caches emptied first, so the sum is no wall time: with
#      dependent launch (kernels overlapping) it can exceed the step's.
#   bash scripts/gpu-decode-profile.sh     (NCU_COUNT: kernels profiled, default 1500)
# Results: $OUT/decode-profile.md (or gpu-out/).
set -uo pipefail
GPU_TARGETS=${GPU_TARGETS:-generation_bench cuda_decode_linear_variants}
source "$(dirname "$0")/gpu-bench-env.sh"
hbm_tb_per_s=$(card_hbm_tb_per_s) || exit 2
cd "$root"
report="$out/decode-profile.md"
: >"$report"
{
  echo "## decode products: kernel shapes"
  timeout 120 "$bin/cuda_decode_linear_variants"
} 2>&1 | tee -a "$report"
bench=("$bin/generation_bench" --shape 7b --device cuda --dtype bfloat16 --fused_kernels --cuda_graphs
  --key_length_multiples 128 --batch 0 --prompt_tokens 128 --hbm_tb_per_s "$hbm_tb_per_s")
{
  echo "## batch-1 decode"
  timeout 300 "${bench[@]}" --decode_tokens 256
} 2>&1 | tee "$out/decode-wall.log" | tee -a "$report"
tokens_per_s=$(grep -o 'CUDA graphs): [0-9.]*' "$out/decode-wall.log" | head -n 1 | sed 's/.*: //')
wall_ms=$(awk -v t="${tokens_per_s:-0}" 'BEGIN { if (t > 0) printf "%.4f", 1000 / t; else print 0 }')
timeout "${NCU_TIMEOUT:-300}" ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
  --csv --print-units base --launch-count "${NCU_COUNT:-1500}" "${bench[@]}" --decode_tokens 16 --profile_decode \
  >"$out/decode-profile.csv" 2>"$out/decode-profile.err"
{
  echo "## one graphed decode step's kernels (Nsight Compute; wall from the run above)"
  # A graphed step begins with two arange launches (the attention's rows and the sampled rows).
  python3 scripts/bench/kernel_time_table.py "$out/decode-profile.csv" --step_marker 'arange' \
    --wall_ms "$wall_ms" --top 30 || tail -n 20 "$out/decode-profile.err"
} 2>&1 | tee -a "$report"
