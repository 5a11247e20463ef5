#!/usr/bin/env bash
# On a GPU host: the decode linear (Note [Decode linear],
# runtime/model/decode_linear.h). Runs its GPU tests and the engine tests that
# go through it (fused kernels, decode graphs), then decode_linear_bench: a
# Llama-2-7B decode step's linear layers through cuBLAS and through the kernel
# in one run, bf16 and int8, at 1, 2, 4 and 8 rows.
#   bash scripts/gpu-decode-linear-bench.sh     (ROWS=1,2,4,8; HBM_TB_PER_S: the card's, gpu-bench-env.sh)
# Results: $OUT/decode-linear-bench.log and $OUT/decode-linear-tests.log (or gpu-out/).
set -uo pipefail
GPU_TARGETS=${GPU_TARGETS:-model_tests generate_tests decode_linear_bench}
source "$(dirname "$0")/gpu-bench-env.sh"
hbm_tb_per_s=$(card_hbm_tb_per_s) || exit 2
cd "$root"
status=0
timeout 300 "$bin/model_tests" --gtest_filter='*DecodeLinear*:*FusedOps*' >"$out/decode-linear-tests.log" 2>&1 || status=1
timeout 300 "$bin/generate_tests" --gtest_filter='*FusedDecode*:DecodeGraphs*' >>"$out/decode-linear-tests.log" 2>&1 ||
  status=1
grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|Failure|error' "$out/decode-linear-tests.log" | head -n 40
timeout "${BENCH_TIMEOUT:-300}" "$bin/decode_linear_bench" --int8 --rows "${ROWS:-1,2,4,8}" \
  --hbm_tb_per_s "$hbm_tb_per_s" 2>&1 | tee "$out/decode-linear-bench.log"
exit "$status"
