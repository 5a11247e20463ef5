#!/usr/bin/env bash
# Tensor parallelism through dslaunch (issue 16): gpt-tiny as TP 2 on 2 ranks
# (with and without sequence parallelism) and as TP 2 x DP 2 on 4 ranks at
# ZeRO-1 and ZeRO-3 gives the per-step losses of one rank; a setting not built
# for tensor parallelism yet (checkpoint.dir) is refused naming it, before any
# step.
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?DSRANK must point at the dsrank binary}"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg
COMMON=(--override "data.prepared=$WORK/data/fortunes" --override train.eval_interval=0 --override 'checkpoint.dir=""'
  --override train.global_batch_size=8 --override train.steps=8 --override train.warmup_steps=2)

run_job one 1 --override train.micro_batch_size=8
run_job tp2 2 --override ds_config.tensor_parallel.tp_size=2 --override train.micro_batch_size=8
same_losses one tp2 "TP 2 vs 1 rank"
run_job tp2sp 2 --override ds_config.tensor_parallel.tp_size=2 --override model.sequence_parallel=true \
  --override train.micro_batch_size=8
same_losses one tp2sp "TP 2 with sequence parallelism vs 1 rank"
pass "TP 2 (sequence parallel on and off) gives the losses of one rank"

for stage in 1 3; do
  run_job tp2dp2z$stage 4 --override ds_config.tensor_parallel.tp_size=2 --override train.micro_batch_size=4 \
    --override ds_config.zero_optimization.stage=$stage \
    --override ds_config.zero_optimization.stage3_param_persistence_threshold=0
  same_losses one tp2dp2z$stage "TP 2 x DP 2 at ZeRO-$stage vs 1 rank"
done
pass "TP 2 x DP 2 at ZeRO-1 and ZeRO-3 gives the losses of one rank"

if "$DSLAUNCH" --num_gpus 2 "${COMMON[@]}" --override ds_config.tensor_parallel.tp_size=2 \
  --override "checkpoint.dir=$WORK/ckpt" --override train.micro_batch_size=8 "$CONFIG" \
  >"$WORK/refused.out" 2>"$WORK/refused.err"; then
  fail "a tensor-parallel job with checkpoint.dir ran"
fi
grep -q "checkpoint.dir (checkpoints of split parameters) with tensor_parallel.tp_size=2 is not yet supported" \
  "$WORK/refused.out" "$WORK/refused.err" || fail "no refusal naming checkpoint.dir: $(tail -3 "$WORK/refused.err")"
! grep -q "^1	" "$WORK/refused.out" || fail "the refused job trained a step"
pass "checkpoint.dir with TP 2 is refused naming the setting"
