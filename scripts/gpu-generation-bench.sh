#!/usr/bin/env bash
# On a GPU host: the generation engine (issue 20) on a Llama-2-7B-shaped
# model in bf16, random weights (runtime/generate/generation_bench_main.cc):
# time to first token of a 2,000-token prompt, batch-1 decode against the HBM
# roofline and against an uncached reference, continuous batching at batch
# 64; then the PyTorch reference in the same run, written as gpt-fast does
# (static cache, torch.compile; scripts/bench/static_cache_reference.py).
#   bash scripts/gpu-generation-bench.sh      (REFERENCE=0: skip the PyTorch reference;
#   FUSED=1: the CUDA kernels for RMSNorm, RoPE, SwiGLU, paged decode attention and
#   decode products; KEY_LENGTH_MULTIPLES=1,128;
#   GRAPHS=1: the decode figures again with CUDA graphs (Note [Decode graphs]),
#   after the decode-graph, greedy-choice and engine tests run on the GPU; INT8=1: weight-only int8
#   projections, the PyTorch reference staying bf16; OFFLOAD=1: ZeRO-Inference,
#   the decoder layers streamed from pinned host memory with the GPU capped
#   at CUDA_LIMIT_GB (default 12, below the model's 13.5 GB), with BATCH=16
#   so the key/value cache fits beside it)
# BENCH_ARGS: more generation_bench flags (e.g. --decode_tokens 64 --batch_new_tokens 32).
# Results: $OUT/generation-bench.log (LOG: another name; $OUT or gpu-out/); the exit status is the
# benchmark's (124: BENCH_TIMEOUT ran out), else the reference's.
set -uo pipefail
GPU_TARGETS=${GPU_TARGETS:-generation_bench${GRAPHS:+ generate_tests}}
source "$(dirname "$0")/gpu-bench-env.sh"
hbm_tb_per_s=$(card_hbm_tb_per_s) || exit 2
cd "$root"
if [[ -n "${GRAPHS:-}" ]]; then
  timeout 300 "$bin/generate_tests" --gtest_filter='DecodeGraphs*:*FusedDecode*:*GreedyChoice*:GenerationEngine*' 2>&1 | tail -n 25 | tee "$out/decode-graphs-tests.log"
fi
timeout "${BENCH_TIMEOUT:-300}" "$bin/generation_bench" --shape 7b --device cuda --dtype bfloat16 \
  --decode_tokens "${DECODE_TOKENS:-256}" --batch "${BATCH:-64}" --key_length_multiples "${KEY_LENGTH_MULTIPLES:-1,128}" \
  ${FUSED:+--fused_kernels} ${GRAPHS:+--cuda_graphs} ${INT8:+--int8} \
  --hbm_tb_per_s "$hbm_tb_per_s" ${BENCH_ARGS:-} \
  ${OFFLOAD:+--offload_params cpu --cuda_memory_limit_gb "${CUDA_LIMIT_GB:-12}"} 2>&1 | tee "$out/${LOG:-generation-bench.log}"
bench_status=$?
[[ $bench_status == 0 ]] || exit "$bench_status"
if [[ "${REFERENCE:-1}" != 0 ]]; then
  timeout "${REFERENCE_TIMEOUT:-300}" python3 scripts/bench/static_cache_reference.py \
    --decode_tokens "${DECODE_TOKENS:-256}" 2>&1 | grep -v Warning | tail -n 5 | tee -a "$out/${LOG:-generation-bench.log}"
fi
