#!/usr/bin/env bash
# Instruction data beyond the seeds' example (issue 15), on the same tiny
# Alpaca records and Llama folder as test_llama_instruct.sh:
#  - packed records: 1 rank at ZeRO-0 and 2 ranks at ZeRO-3 give the same
#    losses, and stop/resume is bit for bit;
#  - a full fine-tune (lora.r 0) on the same records: 1 rank = 2 ranks at ZeRO-1.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_instruct_setup.sh"

# 1. Packed records: 1 rank ZeRO-0 = 2 ranks ZeRO-3; stop at 3, resume to 6, bit for bit.
PACK=(--override data.packing=true --override train.steps=6 --override train.eval_interval=0 --override train.warmup_steps=2)
run_job pack0 1 "${PACK[@]}" --override ds_config.zero_optimization.stage=0
grep -q "packed" "$WORK/pack0.out" || fail "the samples are not packed: $(grep -m2 'training data' "$WORK/pack0.out")"
run_job pack3 2 "${PACK[@]}" --override ds_config.zero_optimization.stage=3 \
  --override ds_config.zero_optimization.stage3_param_persistence_threshold=0
same_losses pack0 pack3 "packed records: ZeRO-3 on 2 ranks vs ZeRO-0 on 1"
set +e
"$DSLAUNCH" --num_gpus 2 "${COMMON[@]}" "${PACK[@]}" --override "checkpoint.dir=$WORK/ck" --override checkpoint.interval=3 \
  "$CONFIG" --loss_log "$WORK/resumed.tsv" --exit_at_step 3 >"$WORK/first.out" 2>&1
code=$?
set -e
((code == 1)) || fail "the first half should stop with 1 after step 3, got $code"
run_job second 2 "${PACK[@]}" --override "checkpoint.dir=$WORK/ck" --override checkpoint.interval=3
run_job straight 2 "${PACK[@]}"
cat "$WORK/second.tsv" >>"$WORK/resumed.tsv"
cmp "$WORK/straight.tsv" "$WORK/resumed.tsv" || fail "resumed losses differ: $(diff "$WORK/straight.tsv" "$WORK/resumed.tsv" | head -4)"
pass "packed records: ZeRO-0 on 1 rank = ZeRO-3 on 2; stop at 3 and resume to 6 bit-identically (ZeRO-2)"

# 2. A full fine-tune on the same records: 1 rank = 2 ranks at ZeRO-1.
FULL=(--override lora.r=0 --override 'lora.target_modules=[]' --override train.steps=6 --override train.eval_interval=0
  --override train.warmup_steps=2 --override train.lr=1e-3)
run_job full0 1 "${FULL[@]}" --override ds_config.zero_optimization.stage=0
! grep -q "LoRA r=" "$WORK/full0.out" || fail "LoRA is on with lora.r 0"
run_job full1 2 "${FULL[@]}" --override ds_config.zero_optimization.stage=1
same_losses full0 full1 "full fine-tune on instruction data: ZeRO-1 on 2 ranks vs ZeRO-0 on 1"
pass "full fine-tune on the Alpaca records: ZeRO-0 on 1 rank = ZeRO-1 on 2"

