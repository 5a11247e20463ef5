#!/usr/bin/env bash
# Note [Flops profiler]: the ds_config's flops_profiler through dslaunch and
# dsrank (gpt-tiny, two Gloo ranks). At profile_step rank 0 prints
# DeepSpeed's three sections; the forward MACs equal the arithmetic of the
# model's shape (8 x 64 tokens; width 64, 2 blocks, vocabulary 257 tied to
# the head): per block 512 x 12·64² + 2·512·64·64 = 29,360,128, the head
# 512 x 257·64 = 8,421,376, in all 67,141,632. output_file, detailed,
# module_depth and top_modules are honoured; at ZeRO-3 the counts are the same;
# pipeline stages are refused by --validate.
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

# ZeRO-3: the parameters are partitioned, their shapes are not; each layer is
# gathered for its timed pass. The same model and batch: the same counts.
"$DSLAUNCH" "${COMMON[@]}" --override "checkpoint.dir=$WORK/ck-z3" --override ds_config.zero_optimization.stage=3 \
  --override ds_config.zero_optimization.stage3_param_persistence_threshold=0 \
  "$CONFIG" --quiet_config --loss_log "$WORK/z3.tsv" >"$WORK/z3.out" 2>"$WORK/z3.err" || fail "the ZeRO-3 profiled job exited $?: $(tail -3 "$WORK/z3.err")"
sed 's/^\[[^]]*\] //' "$WORK/z3.out" >"$WORK/z3.txt"
for expected in '^params per GPU: +120.64 K$' '^fwd MACs per GPU: +67.14 MMACs$' "^    MACs        - \{'blocks.0': '29.36 MMACs'\}$" \
  '^  \(blocks.1\): GptBlock\(49.98 K = 41.43% Params, 29.36 MMACs = 43.73% MACs, ' '^fwd latency: +[0-9.]+ (ms|us|s)$'; do
  grep -Eq "$expected" "$WORK/z3.txt" || fail "the ZeRO-3 profile lacks /$expected/: $(sed -n '/Flops Profiler/,$p' "$WORK/z3.txt" | head -40)"
done
grep -q '^dsrank: done: 3 step(s)' "$WORK/z3.txt" || fail "the ZeRO-3 job did not finish its 3 steps after the profile"
# The run trains on as without the profiler: its losses match a ZeRO-3 run without it.
"$DSLAUNCH" --num_gpus 2 --override "data.prepared=$WORK/data/fortunes" --override train.steps=3 --override train.warmup_steps=1 \
  --override train.eval_interval=0 --override checkpoint.interval=0 --override "checkpoint.dir=$WORK/ck-z3-plain" \
  --override ds_config.zero_optimization.stage=3 --override ds_config.zero_optimization.stage3_param_persistence_threshold=0 \
  "$CONFIG" --quiet_config --loss_log "$WORK/z3plain.tsv" >"$WORK/z3plain.out" 2>"$WORK/z3plain.err" ||
  fail "the plain ZeRO-3 job exited $?"
(($(wc -l <"$WORK/z3.tsv") == 3)) && cmp -s "$WORK/z3.tsv" "$WORK/z3plain.tsv" ||
  fail "profiling changed the ZeRO-3 run: $(paste "$WORK/z3.tsv" "$WORK/z3plain.tsv")"
pass "at ZeRO-3 the profile has the same parameters and MACs, and the run's losses are those of a run without it"

set +e
"$DSLAUNCH" --num_gpus 2 --validate "$CONFIG" --override ds_config.flops_profiler.enabled=true \
  --override ds_config.pipeline.stages=2 >"$WORK/pp.out" 2>"$WORK/pp.err"
code=$?
set -e
((code == 2)) && grep -q "flops_profiler.enabled=true: the flops profiler with pipeline stages is not yet supported" \
  "$WORK/pp.err" || fail "pipeline stages with the profiler were not refused (exit $code): $(cat "$WORK/pp.err")"
pass "the profiler with pipeline stages is refused by --validate, naming the key"
