#!/usr/bin/env bash
# On the GPU host: build with scripts/gpu-build.sh, run the runtime's unit
# tests, then gpt-tiny (bf16, NCCL at world size 1) and gpt-124m through
# dslaunch, printing tokens/s. Logs go to $OUT (or ./gpu-out).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi -L
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
ls "$(python3 -c 'import torch,os; print(os.path.dirname(torch.__file__))')/include" | tr '\n' ' '; echo
time bash "$root/scripts/gpu-build.sh" "$root/.gpu-deps" dsrank dslaunch dsagent comm_tests model_tests zero_tests engine_tests checkpoint_tests >"$out/build.log" 2>&1
status=$?
tail -n 40 "$out/build.log"
((status == 0)) || exit $status
export LD_LIBRARY_PATH=/opt/dslaunch-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
bin="$root/build-gpu/bin"
bash "$root/scripts/gpu-runtime-tests.sh" "$bin" 2>&1 | grep -E -A12 'Failure|^\[  (PASSED|FAILED)' | head -n 60
cd "$root"
# The host has no fortunes package: datasets prepared elsewhere travel in .gpu-data.
data=${GPU_DATA:-$root/.gpu-data}
"$bin/dslaunch" --num_gpus 1 --override train.precision=bf16 --override train.steps=100 \
  --override "data.prepared=$data/fortunes-byte" --override "checkpoint.dir=/tmp/ck-tiny" \
  --override checkpoint.interval=50 configs/gpt-tiny.cfg 2>&1 | grep -v '^\[localhost:0\]  ' | tee "$out/gpt-tiny.log" | tail -n 16
"$bin/dslaunch" --num_gpus 1 --override "data.prepared=$data/fortunes-all-byte" configs/gpt-124m.cfg 2>&1 | grep -v '^\[localhost:0\]  ' | tee "$out/gpt-124m.log" | tail -n 16
# Resume on GPU: the last 50 steps again from the checkpoint at 50.
rm -rf /tmp/ck-tiny/global_step100 && echo global_step50 >/tmp/ck-tiny/latest
"$bin/dslaunch" --num_gpus 1 --override train.precision=bf16 --override train.steps=100 \
  --override "data.prepared=$data/fortunes-byte" --override "checkpoint.dir=/tmp/ck-tiny" \
  --override checkpoint.interval=50 configs/gpt-tiny.cfg 2>&1 | grep -E 'resumed|step=100 |done' | tee "$out/gpt-tiny-resume.log"
