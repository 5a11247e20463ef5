#!/usr/bin/env bash
# On a GPU host: the fused kernels' correctness and speed.
#   1. the GPU tests of the kernels (fused ops and fused AdamW against LibTorch),
#   2. the kernel micro-benchmark (bandwidth against the device's copy),
#   3. the first 50 losses of gpt-tiny on the GPU in bf16 (fused kernels, and
#      LibTorch's ops) against the CPU run in fp32: each must stay within
#      bf16 tolerance (2% relative) of the CPU loss at every step.
set -uo pipefail
source "$(dirname "$0")/gpu-bench-env.sh"
cd "$root"
status=0
bash "$root/scripts/gpu-runtime-tests.sh" "$bin" --gtest_filter="*Fused*:*ZeroGpu*" 2>&1 | tee "$out/kernel-tests.log" |
  grep -E -A8 'Failure|^\[  (PASSED|FAILED|SKIPPED)' | head -n 60
grep -q '^\[  PASSED  \]' "$out/kernel-tests.log" && ! grep -q '^\[  FAILED  \]' "$out/kernel-tests.log" || status=1
"$bin/cuda_kernel_bench" | tee "$out/kernel-bench.log" || status=1
tiny=(configs/gpt-tiny.cfg --override "data.prepared=$data/fortunes-byte" --override train.steps=50
      --override train.eval_interval=0 --override checkpoint.resume=false)
"$bin/dsrank" "${tiny[@]}" --device cpu --override train.precision=fp32 --loss_log "$out/tiny-cpu-fp32.tsv" >"$out/tiny-cpu.log" 2>&1
"$bin/dsrank" "${tiny[@]}" --device cuda --override train.precision=bf16 --loss_log "$out/tiny-gpu-bf16.tsv" >"$out/tiny-gpu.log" 2>&1 || tail -n 15 "$out/tiny-gpu.log"
"$bin/dsrank" "${tiny[@]}" --device cuda --override train.precision=bf16 --override model.fused_kernels=false \
  --loss_log "$out/tiny-gpu-bf16-unfused.tsv" >"$out/tiny-gpu-unfused.log" 2>&1
python3 - "$out" <<'PYEOF' || status=1
import sys
out = sys.argv[1]
def losses(name):
    return [float(line.split()[1]) for line in open(f"{out}/{name}.tsv")]
cpu = losses("tiny-cpu-fp32")
ok = len(cpu) == 50
for name in ("tiny-gpu-bf16", "tiny-gpu-bf16-unfused"):
    gpu = losses(name)
    worst = max(abs(g - c) / c for g, c in zip(gpu, cpu)) if len(gpu) == len(cpu) else float("inf")
    print(f"gpt-tiny {name} vs CPU fp32 over {len(gpu)} steps: worst relative loss difference {worst:.4f} "
          f"(first {gpu[0]:.4f} vs {cpu[0]:.4f}, last {gpu[-1]:.4f} vs {cpu[-1]:.4f})")
    ok = ok and worst <= 0.02
print("gpt-tiny GPU losses within bf16 tolerance of the CPU run:", "yes" if ok else "NO")
sys.exit(0 if ok else 1)
PYEOF
exit $status
