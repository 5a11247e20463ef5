#!/usr/bin/env bash
# Note [Flops profiler]: the ds_config's flops_profiler through dslaunch and
# dsrank (gpt-tiny, two Gloo ranks). At profile_step rank 0 prints
# DeepSpeed's three sections; the forward MACs equal the arithmetic of the
# model's shape (8 x 64 tokens; width 64, 2 blocks, vocabulary 257 tied to
# the head): per block 512 x 12·64² + 2·512·64·64 = 29,360,128, the head
# 512 x 257·64 = 8,421,376, in all 67,141,632. output_file, detailed,
# module_depth and top_modules are honoured; ZeRO-3 is refused by --validate.
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?DSRANK must point at the dsrank binary}"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg
COMMON=(--num_gpus 2 --override "data.prepared=$WORK/data/fortunes" --override train.steps=3 --override train.warmup_steps=1
  --override train.eval_interval=0 --override checkpoint.interval=0
  --override ds_config.flops_profiler.enabled=true --override ds_config.flops_profiler.profile_step=2)

"$DSLAUNCH" "${COMMON[@]}" --override "checkpoint.dir=$WORK/ck-p" "$CONFIG" --quiet_config >"$WORK/p.out" 2>"$WORK/p.err" ||
  fail "the profiled job exited $?: $(tail -3 "$WORK/p.err")"
sed 's/^\[[^]]*\] //' "$WORK/p.out" >"$WORK/p.txt"
for expected in '^-+ DeepSpeed Flops Profiler -+$' '^Profile Summary at step 2:$' '^world size: +2$' \
  '^data parallel size: +2$' '^model parallel size: +1$' '^batch size per GPU: +8$' '^params per GPU: +120.64 K$' \
  '^fwd MACs per GPU: +67.14 MMACs$' '^fwd flops per GPU: +134.28 M$' '^fwd latency: +[0-9.]+ (ms|us|s)$' \
  '^bwd FLOPS per GPU = 2 \* fwd flops per GPU / bwd latency: +[0-9.]+ [KMGT]?FLOPS$' '^iter latency: +[0-9.]+ (ms|s)$' \
  '^samples/second: +[0-9.]+$' '^-+ Aggregated Profile per GPU -+$' "^    MACs        - \{'blocks.0': '29.36 MMACs'\}$" \
  '^-+ Detailed Profile per GPU -+$' '^  \(blocks.1\): GptBlock\(49.98 K = 41.43% Params, 29.36 MMACs = 43.73% MACs, ' \
  '^  \(head\): Head\(128.00 = 0.11% Params, 8.42 MMACs = 12.54% MACs, '; do
  grep -Eq "$expected" "$WORK/p.txt" || fail "the profile lacks /$expected/: $(sed -n '/Flops Profiler/,$p' "$WORK/p.txt" | head -50)"
done
(($(grep -c 'Profile Summary' "$WORK/p.txt") == 1)) || fail "the profile was printed more than once"
grep -q '^dsrank: done: 3 step(s)' "$WORK/p.txt" || fail "the job did not finish its 3 steps"
pass "at profile_step rank 0 prints DeepSpeed's summary, aggregated and detailed profiles; MACs match the model's arithmetic"

"$DSLAUNCH" "${COMMON[@]}" --override "checkpoint.dir=$WORK/ck-f" --override "ds_config.flops_profiler.output_file=$WORK/out/profile.txt" \
  --override ds_config.flops_profiler.detailed=false --override ds_config.flops_profiler.top_modules=2 \
  "$CONFIG" --quiet_config >"$WORK/f.out" 2>"$WORK/f.err" || fail "the job with output_file exited $?: $(tail -3 "$WORK/f.err")"
grep -q "dsrank: flops profile of step 2 written to $WORK/out/profile.txt" "$WORK/f.out" || fail "output_file was not said"
! grep -q 'Profile Summary' "$WORK/f.out" || fail "the profile went to stdout as well"
grep -q '^fwd MACs per GPU: *67.14 MMACs$' "$WORK/out/profile.txt" || fail "output_file lacks the summary"
! grep -q 'Detailed Profile' "$WORK/out/profile.txt" || fail "detailed=false still printed the detailed profile"
grep -Eq "^    params      - \{'blocks.0': '49.98 K', 'blocks.1': '49.98 K'\}$" "$WORK/out/profile.txt" ||
  fail "top_modules=2 did not list two modules: $(grep params "$WORK/out/profile.txt")"
pass "output_file, detailed=false and top_modules=2 are honoured"

set +e
"$DSLAUNCH" --num_gpus 2 --validate "$CONFIG" --override ds_config.flops_profiler.enabled=true \
  --override ds_config.zero_optimization.stage=3 >"$WORK/z3.out" 2>"$WORK/z3.err"
code=$?
set -e
((code == 2)) && grep -q "flops_profiler.enabled=true: the flops profiler at zero_optimization.stage 3 is not yet supported" \
  "$WORK/z3.err" || fail "ZeRO-3 with the profiler was not refused (exit $code): $(cat "$WORK/z3.err")"
pass "the profiler at ZeRO-3 is refused by --validate, naming the key"
