#!/usr/bin/env bash
# ZeRO-Infinity's optimizer offload to NVMe (Note [NVMe offload] in
# runtime/offload/swapped_shard.h) through dslaunch and dsrank: the same
# losses as CPU offload bit for bit (through io_uring and through
# pread/pwrite), a restart from a checkpoint that ends where the
# uninterrupted run does, swap files gone after the job, and a bad nvme_path
# refused before anything starts. Then ZeRO-3 with the parameters on NVMe
# too (Note [Parameters on NVMe] in runtime/zero/zero_partition.h): the
# losses of the parameters in host memory, a restart, a LoRA fine-tune of
# the tiny Llama whose frozen base lives on the drive, and a bad
# offload_param.nvme_path refused by its key.
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?DSRANK must point at the dsrank binary}"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg
# Swap files need a real file system: not tmpfs (refused, it saves no memory).
if [[ $(stat -f -c %T "$WORK") == tmpfs ]]; then NVME=$(mktemp -d "$PWD/nvme.XXXXXX"); else NVME=$WORK/nvme; fi
mkdir -p "$NVME"
cleanup_nvme() { rm -rf "$NVME"; }
trap 'cleanup_nvme; cleanup_all' EXIT
COMMON=(--override "data.prepared=$WORK/data/fortunes" --override train.eval_interval=0 --override train.steps=8
  --override train.warmup_steps=2 --override ds_config.steps_per_print=4 --override ds_config.zero_optimization.stage=2
  --override ds_config.zero_optimization.sub_group_size=20000 --override ds_config.aio.block_size=65536)
NVME_ARGS=(--override ds_config.zero_optimization.offload_optimizer.device=nvme
  --override "ds_config.zero_optimization.offload_optimizer.nvme_path=$NVME")

run() {  # NAME [dslaunch arguments...]; RANK_ARGS: dsrank's own, after the job file
  local name=$1
  shift
  "$DSLAUNCH" --num_gpus 2 "${COMMON[@]}" "$@" "$CONFIG" --quiet_config --loss_log "$WORK/$name.tsv" ${RANK_ARGS:-} \
    >"$WORK/$name.out" 2>"$WORK/$name.err" || fail "$name exited $?: $(tail -3 "$WORK/$name.err")"
}

run cpu --override ds_config.zero_optimization.offload_optimizer.device=cpu --override 'checkpoint.dir=""'
run nvme "${NVME_ARGS[@]}" --override 'checkpoint.dir=""'
cmp -s "$WORK/cpu.tsv" "$WORK/nvme.tsv" || fail "NVMe offload's losses differ from CPU offload's: $(paste "$WORK/cpu.tsv" "$WORK/nvme.tsv" | head -3)"
grep -q 'dsrank: NVMe offload (aio keys from aio): optimizer: 3 swap files per sub-group of 20000 elements' "$WORK/nvme.out" ||
  fail "no NVMe offload line: $(grep dsrank "$WORK/nvme.out" | head -5)"
grep -q 'io_uring, queue depth 8, 64 KiB blocks' "$WORK/nvme.out" || fail "io_uring is not said: $(grep 'NVMe offload' "$WORK/nvme.out")"
grep -q '| ZeRO-2, optimizer offloaded to nvme$' "$WORK/nvme.out" || fail "the step line does not say nvme"
# Note [Swap path probe]: the drive's speed and what a step's swap costs.
grep -Eq 'dsrank: nvme_path probe of [0-9.]+ MiB: write [0-9.]+ GB/s, read [0-9.]+ GB/s; a step reads and writes [0-9.]+ GB of swap files: about [0-9.]+ s per step from the drive \(reads and writes overlapped\)' \
  "$WORK/nvme.out" || fail "no probe line: $(grep 'dsrank: nvme' "$WORK/nvme.out")"
pass "NVMe offload (io_uring) gives CPU offload's losses bit for bit: $(tr '\n' ' ' <"$WORK/nvme.tsv" | cut -c1-60)..."

DSLAUNCH_NO_IO_URING=1 run pread "${NVME_ARGS[@]}" --override 'checkpoint.dir=""'
cmp -s "$WORK/cpu.tsv" "$WORK/pread.tsv" || fail "pread/pwrite NVMe offload's losses differ"
grep -q 'pread/pwrite on 1 thread(s), 64 KiB blocks.*(io_uring not requested)' "$WORK/pread.out" ||
  fail "the fallback is not said: $(grep 'NVMe offload' "$WORK/pread.out")"
pass "NVMe offload through pread/pwrite: the same losses, and it says why"

# A rank that fails after step 6 is restarted from the checkpoint of step 4:
# steps 5-8 of the restart are the uninterrupted run's.
RANK_ARGS="--exit_at_step 6" run restarted "${NVME_ARGS[@]}" --override "checkpoint.dir=$WORK/ck" \
  --override checkpoint.interval=4 --max_restarts 1
grep -q 'resumed from .*global_step4' "$WORK/restarted.out" || fail "the restart did not resume from global_step4"
tail -n 4 "$WORK/restarted.tsv" | cmp -s - <(tail -n 4 "$WORK/nvme.tsv") ||
  fail "after the restart, steps 5-8 differ: $(tail -n 4 "$WORK/restarted.tsv" | tr '\n' ' ') vs $(tail -n 4 "$WORK/nvme.tsv" | tr '\n' ' ')"
pass "a restart from an NVMe-offloaded checkpoint ends where the uninterrupted run does"

[[ -z $(find "$NVME/dslaunch-swap" -mindepth 1 2>/dev/null) ]] || fail "swap files left behind: $(find "$NVME" | head)"
pass "no swap file left after the jobs"

set +e
"$DSLAUNCH" --num_gpus 2 "${COMMON[@]}" --override ds_config.zero_optimization.offload_optimizer.device=nvme \
  --override "ds_config.zero_optimization.offload_optimizer.nvme_path=$WORK/missing" "$CONFIG" >"$WORK/missing.out" 2>"$WORK/missing.err"
code=$?
set -e
((code == 2)) || fail "a missing nvme_path: exit $code"
grep -q "zero_optimization.offload_optimizer.nvme_path=$WORK/missing is not a folder" "$WORK/missing.err" ||
  fail "a missing nvme_path is not named: $(cat "$WORK/missing.err")"
grep -q "dsrank" "$WORK/missing.out" && fail "a rank started with a missing nvme_path"
pass "a missing nvme_path is refused before any rank starts"

# ZeRO-3, the optimizer on NVMe, the parameters in host memory or on NVMe.
Z3=(--override ds_config.zero_optimization.stage=3 --override ds_config.zero_optimization.stage3_param_persistence_threshold=0
  "${NVME_ARGS[@]}" --override 'checkpoint.dir=""')
PARAMS_NVME=(--override ds_config.zero_optimization.offload_param.device=nvme
  --override "ds_config.zero_optimization.offload_param.nvme_path=$NVME")
run z3host "${Z3[@]}" --override ds_config.zero_optimization.offload_param.device=cpu
run z3nvme "${Z3[@]}" "${PARAMS_NVME[@]}"
cmp -s "$WORK/z3host.tsv" "$WORK/z3nvme.tsv" ||
  fail "parameters on NVMe: losses differ from the host's: $(paste "$WORK/z3host.tsv" "$WORK/z3nvme.tsv" | head -3)"
grep -Eq 'dsrank: NVMe offload .*; parameters: [0-9]+ files under .*-rank0-params' "$WORK/z3nvme.out" ||
  fail "the parameter files are not said: $(grep 'NVMe offload' "$WORK/z3nvme.out")"
grep -Eq 'dsrank: nvme_path probe of .* a step reads [0-9.]+ GB \([0-9.]+ GB of them during forward and backward\) and writes [0-9.]+ GB of swap files' "$WORK/z3nvme.out" ||
  fail "the probe does not count the parameters' reads: $(grep 'dsrank: nvme' "$WORK/z3nvme.out")"
pass "ZeRO-3 with the parameters on NVMe gives the host's losses bit for bit"

RANK_ARGS="--exit_at_step 6" run z3restarted "${Z3[@]}" "${PARAMS_NVME[@]}" --override "checkpoint.dir=$WORK/ck3" \
  --override checkpoint.interval=4 --max_restarts 1
grep -q 'resumed from .*global_step4' "$WORK/z3restarted.out" || fail "the ZeRO-3 restart did not resume from global_step4"
tail -n 4 "$WORK/z3restarted.tsv" | cmp -s - <(tail -n 4 "$WORK/z3nvme.tsv") ||
  fail "parameters on NVMe: after the restart, steps 5-8 differ"
pass "a restart with the parameters on NVMe ends where the uninterrupted run does"

# LoRA on the tiny Llama at ZeRO-3: the frozen base's shard on the drive.
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" "$(dirname "$0")/../hf/make_tiny_llama.py" "$WORK/tiny" llama3_gqa --seed 5 >/dev/null
LLAMA=$(cd "$(dirname "$0")/../../configs" && pwd)/llama-tiny.cfg
lora() {  # NAME PARAM_DEVICE [overrides...]
  local name=$1 device=$2
  shift 2
  "$DSLAUNCH" --num_gpus 2 --override "model.from=$WORK/tiny" --override "data.prepared=$WORK/data/fortunes" \
    --override train.steps=6 --override train.warmup_steps=2 --override train.global_batch_size=8 \
    --override train.micro_batch_size=4 --override train.eval_interval=0 --override 'checkpoint.dir=""' \
    --override lora.r=4 --override 'lora.target_modules=[all-linear]' --override ds_config.zero_optimization.stage=3 \
    --override ds_config.zero_optimization.stage3_param_persistence_threshold=0 \
    --override ds_config.zero_optimization.offload_optimizer.device=cpu \
    --override "ds_config.zero_optimization.offload_param.device=$device" "$@" "$LLAMA" --quiet_config \
    --loss_log "$WORK/$name.tsv" >"$WORK/$name.out" 2>"$WORK/$name.err" || fail "$name exited $?: $(tail -3 "$WORK/$name.err")"
}
lora lora_host cpu
lora lora_nvme nvme --override "ds_config.zero_optimization.offload_param.nvme_path=$NVME"
cmp -s "$WORK/lora_host.tsv" "$WORK/lora_nvme.tsv" ||
  fail "LoRA with the base on NVMe: losses differ: $(paste "$WORK/lora_host.tsv" "$WORK/lora_nvme.tsv" | head -3)"
grep -Eq 'frozen parameters: [0-9]+ files under .*-rank0-params-frozen' "$WORK/lora_nvme.out" ||
  fail "the frozen base's files are not said: $(grep 'NVMe offload' "$WORK/lora_nvme.out")"
pass "LoRA at ZeRO-3 with the frozen base on NVMe gives the host's losses bit for bit"
# offload_param.max_in_cpu: the adapters' pieces and the base's first units
# that fit stay in host memory, the rest on the drive (DeepSpeed ignores it).
lora lora_split nvme --override "ds_config.zero_optimization.offload_param.nvme_path=$NVME" \
  --override ds_config.zero_optimization.offload_param.max_in_cpu=20000
cmp -s "$WORK/lora_host.tsv" "$WORK/lora_split.tsv" ||
  fail "LoRA with max_in_cpu: losses differ: $(paste "$WORK/lora_host.tsv" "$WORK/lora_split.tsv" | head -3)"
grep -Eq 'frozen parameters: [0-9]+ files under .*-rank0-params-frozen.*; [0-9]+ pieces \([0-9.]+ GB\) in host memory' \
  "$WORK/lora_split.out" || fail "the frozen base's pieces in host memory are not said: $(grep 'NVMe offload' "$WORK/lora_split.out")"
pass "max_in_cpu keeps the first pieces that fit in host memory, the losses bit for bit the host's"

[[ -z $(find "$NVME/dslaunch-swap" -mindepth 1 2>/dev/null) ]] || fail "parameter files left behind: $(find "$NVME" | head)"
set +e
"$DSLAUNCH" --num_gpus 2 "${COMMON[@]}" --override ds_config.zero_optimization.stage=3 \
  --override ds_config.zero_optimization.offload_param.device=nvme \
  --override "ds_config.zero_optimization.offload_param.nvme_path=$WORK/missing" "$CONFIG" >"$WORK/pmissing.out" 2>"$WORK/pmissing.err"
code=$?
set -e
((code == 2)) || fail "a missing offload_param.nvme_path: exit $code"
grep -q "zero_optimization.offload_param.nvme_path=$WORK/missing is not a folder" "$WORK/pmissing.err" ||
  fail "a missing offload_param.nvme_path is not named: $(cat "$WORK/pmissing.err")"
pass "a missing offload_param.nvme_path is refused before any rank starts; no parameter file left"
