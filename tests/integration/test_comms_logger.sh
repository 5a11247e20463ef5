#!/usr/bin/env bash
# Note [Comms logger]: the ds_config's comms_logger through dslaunch and
# dsrank on two Gloo ranks. With verbose, rank 0 prints every timed call
# (op, group, time, size, algbw, busbw); at the end, its summary table by op
# and message size, whose counts match the calls printed. prof_ops limits
# what is timed; an op name that is no collective is refused naming it; a
# DeepSpeed speed knob of the block (debug) is a warning.
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?DSRANK must point at the dsrank binary}"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg
COMMON=(--num_gpus 2 --override "data.prepared=$WORK/data/fortunes" --override train.steps=3 --override train.warmup_steps=1
  --override train.eval_interval=0 --override checkpoint.interval=0 --override "checkpoint.dir=$WORK/ck"
  --override ds_config.comms_logger.enabled=true)

"$DSLAUNCH" "${COMMON[@]}" --override ds_config.comms_logger.verbose=true "$CONFIG" --quiet_config \
  >"$WORK/all.out" 2>"$WORK/all.err" || fail "the logged job exited $?: $(tail -3 "$WORK/all.err")"
sed 's/^\[[^]]*\] //' "$WORK/all.out" >"$WORK/all.txt"
calls=$(grep -cE '^comm op: all_reduce \| group: [^|]+ \| time \(ms\): [0-9.]+ \| msg size: [0-9.]+ [KMG]?B \| algbw \(Gbps\): [0-9.]+ \| busbw \(Gbps\): [0-9.]+$' "$WORK/all.txt" || true)
((calls >= 3)) || fail "expected at least one timed all_reduce per step, got $calls: $(grep 'comm op' "$WORK/all.txt" | head -3)"
grep -q "^dsrank: comms logger: rank 0's collectives since the start" "$WORK/all.txt" || fail "no summary"
grep -qE '^Comm\. Op +Message Size +Count +Total Latency\(ms\) +Avg Latency\(ms\) +tput_avg \(Gbps\) +busbw_avg \(Gbps\)$' \
  "$WORK/all.txt" || fail "no summary header: $(grep -A3 'comms logger' "$WORK/all.txt")"
# The summary's all_reduce counts add up to the verbose lines.
summed=$(awk '/^all_reduce$/ {on = 1; next} /^[a-z_]+$/ {on = 0} on && NF >= 7 {n += $(NF - 4)} END {print n + 0}' "$WORK/all.txt")
((summed == calls)) || fail "the summary counts $summed all_reduce calls, the verbose lines $calls"
grep -q "^dsrank: done: 3 step(s)" "$WORK/all.txt" || fail "the job did not finish its 3 steps"
pass "comms_logger.verbose prints each timed call; the summary table counts the same $calls all_reduce calls"

"$DSLAUNCH" "${COMMON[@]}" --override 'ds_config.comms_logger.prof_all=false' \
  --override 'ds_config.comms_logger.prof_ops=["broadcast"]' --override ds_config.comms_logger.debug=true \
  "$CONFIG" --quiet_config >"$WORK/some.out" 2>"$WORK/some.err" || fail "prof_ops job exited $?: $(tail -3 "$WORK/some.err")"
sed 's/^\[[^]]*\] //' "$WORK/some.out" >"$WORK/some.txt"
! grep -q '^all_reduce$' "$WORK/some.txt" || fail "all_reduce was timed although prof_ops names only broadcast"
grep -q "warning: ds_config comms_logger.debug=true has no effect here" "$WORK/some.err" ||
  fail "comms_logger.debug was not named: $(grep -i warn "$WORK/some.err" | head -3)"
pass "prof_ops limits what is timed; comms_logger.debug is a warning naming it"

set +e
"$DSLAUNCH" --validate "$CONFIG" --override ds_config.comms_logger.enabled=true \
  --override 'ds_config.comms_logger.prof_ops=["allreduce"]' >"$WORK/bad.out" 2>"$WORK/bad.err"
code=$?
set -e
((code == 2)) && grep -q "'allreduce' is not a collective" "$WORK/bad.err" ||
  fail "a misspelled op was not refused by name (exit $code): $(cat "$WORK/bad.err")"
pass "an op name that is no collective is refused, named"
