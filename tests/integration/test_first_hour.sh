#!/usr/bin/env bash
# The first hour of a new user, each step as a DeepSpeed or torchrun user
# would try it (issue 21): every mistake gets one clear answer before
# anything starts, and a job says where it is and what happened.
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?}" "${DSPREP:?}" "${DSCONSOLIDATE:?}"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg

# expect_usage_error NAME EXPECTED_TEXT DSLAUNCH_ARGS...: exit 2, the text on
# stderr once, nothing on stdout, no rank started.
expect_usage_error() {
  local name=$1 expected=$2
  shift 2
  set +e
  "$DSLAUNCH" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
  local code=$?
  set -e
  ((code == 2)) || fail "$name: exit $code, expected 2: $(cat "$WORK/$name.err")"
  grep -qF -- "$expected" "$WORK/$name.err" || fail "$name: stderr lacks '$expected': $(cat "$WORK/$name.err")"
  [[ ! -s $WORK/$name.out ]] || fail "$name: wrote to stdout: $(head -3 "$WORK/$name.out")"
  grep -q "dsrank\|step=" "$WORK/$name.err" && fail "$name: something ran"
  (($(grep -c "dslaunch --help lists the options" "$WORK/$name.err") <= 1)) || fail "$name: the hint is printed twice"
  pass "$name"
}

# --- torchrun and DeepSpeed habits -------------------------------------------
expect_usage_error nproc_per_node "unknown option '--nproc_per_node' (torchrun's ranks per node); did you mean '--num_gpus'?" \
  --nproc_per_node 2 "$TEST_RANK"
expect_usage_error nnodes "did you mean '--num_nodes'?" --nnodes 2 "$TEST_RANK"
expect_usage_error standalone "what dslaunch does without a hostfile" --standalone "$TEST_RANK"
expect_usage_error module "'dslaunch [options] python3 -m MODULE ...'" -m pkg.train
expect_usage_error typo "unknown option '--num_gpu'; did you mean '--num_gpus'? (dslaunch --help lists the options)" \
  --num_gpu 2 "$TEST_RANK"
expect_usage_error python_script "write 'dslaunch [options] python3 train.py ...'" train.py --lr 1
expect_usage_error counts_with_include "--include 'localhost:0' cannot be used with --num_gpus" \
  --num_gpus 2 --include localhost:0 "$TEST_RANK"
expect_usage_error console_ranks "--console_ranks names rank 5, but the job has 2 rank(s) (0..1)" \
  --num_gpus 2 --console_ranks 0,5 "$TEST_RANK"

# -H is DeepSpeed's short --hostfile.
printf 'localhost slots=2\n' >"$WORK/hosts"
"$DSLAUNCH" --dry_run -H "$WORK/hosts" "$TEST_RANK" --x >"$WORK/short_h.out" 2>"$WORK/short_h.err" || fail "-H: exit $?"
grep -q '^rank 1: host localhost' "$WORK/short_h.out" || fail "-H did not read the hostfile"
# --local_rank=N right after the program, before its arguments (DeepSpeed).
grep -q '^  argv: .*test_rank --local_rank=1 --x$' "$WORK/short_h.out" || fail "--local_rank placement"
pass "-H reads the hostfile; --local_rank=N comes right after the program"

# CUDA_VISIBLE_DEVICES set for dslaunch becomes this host's slots.
CUDA_VISIBLE_DEVICES=1,3 "$DSLAUNCH" --dry_run "$TEST_RANK" >"$WORK/cvd.out" 2>"$WORK/cvd.err" || fail "cvd: exit $?"
grep -q '^  CUDA_VISIBLE_DEVICES=1,3$' "$WORK/cvd.out" || fail "CUDA_VISIBLE_DEVICES was not honoured: $(cat "$WORK/cvd.out")"
grep -q '^rank 1: host localhost, local rank 1 of 2, device 3$' "$WORK/cvd.out" || fail "rank 1 is not on device 3"
grep -q 'using CUDA_VISIBLE_DEVICES=1,3 as this host' "$WORK/cvd.err" || fail "the conversion is not said"
pass "CUDA_VISIBLE_DEVICES=1,3 gives two ranks on devices 1 and 3"

# --- --validate: one verdict -----------------------------------------------
"$DSLAUNCH" --validate "$CONFIG" >"$WORK/valid.out" 2>"$WORK/valid.err" || fail "a valid file: exit $?"
grep -q "is valid for 1 rank(s); resolved:" "$WORK/valid.out" || fail "no valid verdict on stdout"
[[ ! -s $WORK/valid.err ]] || fail "a valid file wrote to stderr: $(cat "$WORK/valid.err")"
expect_usage_error not_yet_supported "is not valid for 1 rank(s): it asks for what this runtime does not support yet:" \
  --validate "$CONFIG" --override ds_config.elasticity.enabled=true
grep -q "elasticity.enabled=true" "$WORK/not_yet_supported.err" || fail "the unsupported key is not named"
pass "--validate: valid on stdout with exit 0; not supported on stderr with exit 2, no 'valid'"

# Note [Keys without effect here]: a DeepSpeed speed knob is a warning, a
# DeepSpeed feature not built here is refused; neither is silently ignored.
"$DSLAUNCH" --validate "$CONFIG" --override ds_config.zero_optimization.use_multi_rank_bucket_allreduce=false \
  >"$WORK/knob.out" 2>"$WORK/knob.err" || fail "a speed knob made the file invalid: $(cat "$WORK/knob.err")"
grep -q "is valid for 1 rank(s); resolved:" "$WORK/knob.out" || fail "no valid verdict with a speed knob"
grep -q "warning: .*zero_optimization.use_multi_rank_bucket_allreduce=false has no effect here" "$WORK/knob.err" ||
  fail "the speed knob was not named: $(cat "$WORK/knob.err")"
expect_usage_error quantized "ZeRO++ quantized gradient communication (qgZ) is not yet supported" \
  --validate "$CONFIG" --override ds_config.zero_optimization.zero_quantized_gradients=true
pass "--validate: a DeepSpeed speed knob is a warning naming it; a DeepSpeed feature not built here is refused"

# --- fp16 on a machine without GPUs -----------------------------------------
if ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  expect_usage_error fp16_validate "fp16.enabled=true (train.precision=fp16) needs GPUs" \
    --validate "$CONFIG" --override train.precision=fp16
  expect_usage_error fp16_launch "Use train.precision=bf16 or fp32 on the CPU" \
    --override train.precision=fp16 --override "checkpoint.dir=\"\"" "$CONFIG"
fi

# --- tools' --help and dsprep's output folder --------------------------------
"$DSRANK" --help >"$WORK/dsrank_help.out" || fail "dsrank --help: exit $?"
grep -q -- "--quiet_config" "$WORK/dsrank_help.out" || fail "dsrank --help does not list --quiet_config"
"$DSCONSOLIDATE" --help >"$WORK/dsconsolidate_help.out" || fail "dsconsolidate --help: exit $?"
printf 'one line of text\n%%\nanother\n' >"$WORK/corpus.txt"
"$DSPREP" --input "$WORK/corpus.txt" --output "$WORK/new/folder/corpus" >"$WORK/dsprep.out" 2>&1 ||
  fail "dsprep into a new folder: $(cat "$WORK/dsprep.out")"
[[ -s $WORK/new/folder/corpus.bin && -s $WORK/new/folder/corpus.idx ]] || fail "dsprep wrote no dataset"
pass "dsrank --help, dsconsolidate --help; dsprep --output makes its folder"

# Evaluation asked for but impossible is said: a text prepared from one file
# is one document, so a validation fraction holds none of it out.
for i in $(seq 1 200); do echo "line $i of a text that is one document"; done >"$WORK/one.txt"
"$DSPREP" --input "$WORK/one.txt" --output "$WORK/one/corpus" >"$WORK/dsprep_one.out" 2>&1 ||
  fail "dsprep of one file: $(cat "$WORK/dsprep_one.out")"
"$DSLAUNCH" --num_gpus 1 --override "data.prepared=$WORK/one/corpus" --override data.validation_fraction=0.5 \
  --override train.eval_interval=1 --override train.steps=3 --override train.warmup_steps=1 \
  --override checkpoint.interval=0 --override "checkpoint.dir=$WORK/ck_one" "$CONFIG" --quiet_config \
  >"$WORK/one.out" 2>"$WORK/one.err" || fail "the one-document job exited $?: $(tail -3 "$WORK/one.err")"
grep -q "dsrank: no evaluation: data.validation_fraction 0.5 of the dataset's 1 document(s) holds none out" \
  "$WORK/one.out" || fail "a job that cannot evaluate does not say so: $(grep dsrank "$WORK/one.out" | head -5)"
pass "a validation fraction that holds nothing out is said, not dropped"

# --- a job says where it is --------------------------------------------------
JOB=(--override "data.prepared=$WORK/data/fortunes" --override train.eval_interval=0 --override train.steps=6
  --override train.warmup_steps=2 --override ds_config.steps_per_print=3 --override checkpoint.interval=3
  --override "checkpoint.dir=$WORK/ck" --override ds_config.zero_optimization.stage=1)
"$DSLAUNCH" --num_gpus 2 "${JOB[@]}" "$CONFIG" --quiet_config >"$WORK/job.out" 2>"$WORK/job.err" ||
  fail "the job exited $?: $(tail -3 "$WORK/job.err")"
grep -Eq '^\[[^]]*\] step=3 loss=[0-9.]+ .*tokens/s=[0-9]+ \| 3/6 \(50%\) elapsed [0-9]+:[0-9]{2} eta [0-9]+:[0-9]{2} \| ZeRO-1$' \
  "$WORK/job.out" || fail "the step line lacks step/total, elapsed, eta or ZeRO: $(grep -m1 'step=3 ' "$WORK/job.out")"
grep -q "dsrank: checkpoint $WORK/ck/global_step3 committed" "$WORK/job.out" || fail "no committed line"
grep -q "configuration of .* resolved for 2 rank(s) (dslaunch --validate" "$WORK/job.out" || fail "--quiet_config"
grep -q "^\[[^]]*\]   zero_optimization:" "$WORK/job.out" && fail "--quiet_config still printed the configuration"
pass "step line with step/total, elapsed, ETA and ZeRO stage; a line per committed checkpoint; --quiet_config"

# Resumed at train.steps: nothing to train, and it says how to go on.
"$DSLAUNCH" --num_gpus 2 "${JOB[@]}" "$CONFIG" --quiet_config >"$WORK/again.out" 2>"$WORK/again.err" ||
  fail "the resumed job exited $?"
grep -q "nothing to train: checkpoint $WORK/ck/global_step6 is at step 6 and train.steps is 6. To train further, raise train.steps" \
  "$WORK/again.out" || fail "a job resumed at its last step does not say so: $(grep dsrank "$WORK/again.out" | head)"
grep -q "step=" "$WORK/again.out" && fail "the resumed job trained a step"
pass "a job resumed at train.steps says there is nothing to train and how to train on"
