#!/usr/bin/env bash
# Pipeline parallelism through dslaunch (issue 17): gpt-tiny cut into 2
# stages (1F1B, and interleaved with every block recomputed), PP 2 x DP 2 at ZeRO-2 and PP 2 x TP 2 give
# the per-step losses of one rank; a PP 2 x DP 2 checkpoint resumes on one
# rank; wall_clock_breakdown reports each stage's bubble and
# --pipeline_timeline writes a Chrome trace with one row per stage; --dry_run
# prints the partition the ranks cut; a stage that raises, and stages that
# disagree on an activation's shape, stop the job with a root cause naming
# them; a Llama Hugging Face folder trains at PP 2 and exports back exactly from PP 2 x TP 2.
source "$(dirname "$0")/lib.sh"
# --dry_run prints the partition the ranks then print at start, line for line.
same_partition() {  # NAME WORLD [dslaunch arguments...]: NAME.out is the job's output
  local name=$1 world=$2
  shift 2
  "$DSLAUNCH" --dry_run --num_gpus "$world" "${COMMON[@]}" "$@" "$CONFIG" >"$WORK/$name.dry" 2>&1 ||
    fail "--dry_run of $name: $(tail -3 "$WORK/$name.dry")"
  grep -q "^pipeline: " "$WORK/$name.dry" || fail "--dry_run of $name printed no partition: $(head -5 "$WORK/$name.dry")"
  diff <(grep -oE 'stage [0-9]+: .*' "$WORK/$name.dry") <(grep -oE 'stage [0-9]+: .* parameters\)' "$WORK/$name.out") ||
    fail "--dry_run's partition of $name differs from the ranks'"
}
: "${DSRANK:?DSRANK must point at the dsrank binary}"
: "${DSCONSOLIDATE:?DSCONSOLIDATE must point at the dsconsolidate binary}"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg
COMMON=(--override "data.prepared=$WORK/data/fortunes" --override train.eval_interval=0 --override 'checkpoint.dir=""'
  --override train.global_batch_size=8 --override train.steps=8 --override train.warmup_steps=2
  --override train.micro_batch_size=2)

run_job one 1
run_job pp2 2 --override ds_config.pipeline.stages=2
same_losses one pp2 "PP 2 (1F1B, 4 micro-batches) vs 1 rank"
grep -q "dsrank: pipeline: 1f1b schedule, 2 stages, 4 micro-batches per step" "$WORK/pp2.out" ||
  fail "no pipeline line: $(grep -m3 dsrank "$WORK/pp2.out")"
grep -q "  stage 1: blocks.1 .. head" "$WORK/pp2.out" || fail "no partition printed: $(grep -A3 'pipeline:' "$WORK/pp2.out")"
same_partition pp2 2 --override ds_config.pipeline.stages=2
run_job pp2v2 2 --override ds_config.pipeline.stages=2 --override ds_config.pipeline.schedule=interleaved \
  --override ds_config.pipeline.virtual_stages=2 --override ds_config.pipeline.activation_checkpoint_interval=1
same_losses one pp2v2 "PP 2 interleaved (2 virtual stages, every block recomputed) vs 1 rank"
same_partition pp2v2 2 --override ds_config.pipeline.stages=2 --override ds_config.pipeline.schedule=interleaved \
  --override ds_config.pipeline.virtual_stages=2 --override ds_config.pipeline.activation_checkpoint_interval=1
pass "PP 2 (1F1B, and interleaved with activation_checkpoint_interval 1) gives the losses of one rank"

run_job pp2dp2 4 --override ds_config.pipeline.stages=2 --override ds_config.zero_optimization.stage=2
same_losses one pp2dp2 "PP 2 x DP 2 at ZeRO-2 vs 1 rank"
run_job pp2tp2 4 --override ds_config.pipeline.stages=2 --override ds_config.tensor_parallel.tp_size=2 \
  --override ds_config.zero_optimization.stage=1
same_losses one pp2tp2 "PP 2 x TP 2 at ZeRO-1 vs 1 rank"
pass "PP 2 x DP 2 (ZeRO-2) and PP 2 x TP 2 (ZeRO-1) give the losses of one rank"

# A PP 2 x DP 2 checkpoint at step 4 resumed by one rank: steps 5-8 as before.
rm -rf "$WORK/ckpt"
run_job saved 4 --override ds_config.pipeline.stages=2 --override ds_config.zero_optimization.stage=1 \
  --override "checkpoint.dir=$WORK/ckpt" --override checkpoint.interval=4 --override train.steps=4
run_job resumed 1 --override ds_config.zero_optimization.stage=1 --override "checkpoint.dir=$WORK/ckpt" \
  --override checkpoint.interval=4
grep -q "resumed from $WORK/ckpt/global_step4" "$WORK/resumed.out" || fail "did not resume: $(grep dsrank "$WORK/resumed.out")"
! grep -q "^[1-4]	" "$WORK/resumed.tsv" || fail "steps 1-4 ran again"
awk 'NR == FNR { a[$1] = $2; next } ($1 in a) { n++; d = a[$1] - $2; if (d < 0) d = -d; if (d / a[$1] > 1e-4) bad = 1 }
  END { exit bad || n != 4 }' "$WORK/one.tsv" "$WORK/resumed.tsv" || fail "resumed losses differ from one rank's"
pass "a PP 2 x DP 2 checkpoint resumes on one rank"

"$DSLAUNCH" --num_gpus 2 "${COMMON[@]}" --override ds_config.pipeline.stages=2 \
  --override ds_config.wall_clock_breakdown=true --override ds_config.steps_per_print=4 "$CONFIG" \
  --pipeline_timeline "$WORK/timeline.json" >"$WORK/timed.out" 2>"$WORK/timed.err" || fail "timed run exited $?"
grep -q "pipeline stage 1: forward .* bubble .*(schedule's theory 20.0%)" "$WORK/timed.out" ||
  fail "no per-stage breakdown: $(grep -m4 'pipeline stage' "$WORK/timed.out")"
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" - "$WORK/timeline.json" <<'PYEOF' || fail "the timeline is not a Chrome trace with both stages"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
stages = {e["tid"] for e in events if e["ph"] == "X"}
assert stages == {0, 1}, stages
names = [e["name"] for e in events if e["ph"] == "X" and e["tid"] == 1]
assert sum(n.startswith("forward") for n in names) == 4 and sum(n.startswith("backward") for n in names) == 4, names
print("timeline: %d events over stages %s" % (len(events), sorted(stages)))
PYEOF
pass "wall_clock_breakdown reports each stage's bubble; --pipeline_timeline writes both stages"

# expect_stopped NAME ROOT_CAUSE_REGEX WHAT [dslaunch arguments...]: a 2-stage
# job that fails, within 60 s, with a root cause matching ROOT_CAUSE_REGEX.
expect_stopped() {
  local name=$1 cause=$2 what=$3 started=$SECONDS
  shift 3
  if "$DSLAUNCH" --num_gpus 2 "${COMMON[@]}" --override ds_config.pipeline.stages=2 "$CONFIG" "$@" \
    >"$WORK/$name.out" 2>"$WORK/$name.err"; then
    fail "a job whose $what exited 0"
  fi
  grep -q "dslaunch: root cause: $cause" "$WORK/$name.err" ||
    fail "$what: no such root cause: $(grep -m2 'root cause' "$WORK/$name.err")"
  ((SECONDS - started < 60)) || fail "the job whose $what took $((SECONDS - started)) s to stop"
}

# A stage that raises stops the whole job at once, the root cause naming the
# rank, the stage and the micro-batch.
expect_stopped raised "rank 1 .*pipeline stage 1, forward micro-batch 1 chunk 0: injected failure" "stage raised" \
  --raise_at_step 3 --raise_rank 1
pass "a stage that raises stops the job; the root cause names rank 1, stage 1 and micro-batch 1"

# A stage whose activation's shape is not what the next stage expects (here
# stage 0 announces one more time step at step 3): the next stage's
# handshake stops the whole job, the root cause naming both stages, the
# micro-batch and both shapes.
expect_stopped misstated "rank 1 .*pipeline stage 1, .*stage 0 sends the activation of micro-batch 0 as .* but this stage expects .*the stages disagree on the model or the batch shape" \
  "stages disagreed on a shape" --shape_fault_at_step 3 --raise_rank 0
pass "a shape mismatch between stages stops the job; the root cause names both stages, micro-batch 0 and the shapes"

# A Llama-family Hugging Face folder cut into 2 stages trains like one rank;
# with lr 0 the export from PP 2 x TP 2 holds exactly the folder's tensors.
HF=$(cd "$(dirname "$0")/../hf" && pwd)
"$PY" "$HF/make_tiny_llama.py" "$WORK/tiny" llama3_gqa --shards 2 --seed 3
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/llama-tiny.cfg
COMMON=(--override "model.from=$WORK/tiny" --override "data.prepared=$WORK/data/fortunes"
  --override train.eval_interval=0 --override 'checkpoint.dir=""' --override 'export.hf_dir=""'
  --override train.global_batch_size=8 --override train.steps=6 --override train.micro_batch_size=2)
run_job llama1 1
run_job llama_pp2 2 --override ds_config.pipeline.stages=2
same_losses llama1 llama_pp2 "Llama from a Hugging Face folder at PP 2 vs 1 rank"
same_partition llama_pp2 2 --override ds_config.pipeline.stages=2
run_job llama_export 4 --override ds_config.pipeline.stages=2 --override ds_config.tensor_parallel.tp_size=2 \
  --override train.steps=3 --override train.lr=0 --override train.warmup_steps=0 --override train.min_lr=0 \
  --override "export.hf_dir=$WORK/pp_hf" --override export.dtype=float32 \
  --override "checkpoint.dir=$WORK/pp_ck" --override checkpoint.interval=3
"$PY" "$HF/same_tensors.py" "$WORK/tiny" "$WORK/pp_hf" --label "PP 2 x TP 2 export" ||
  fail "the PP 2 x TP 2 export differs from the folder"
# The same from its checkpoint (every stage's and tensor slice's files) by dsconsolidate.
"$DSCONSOLIDATE" "$WORK/pp_ck" --format hf --hf_from "$WORK/tiny" --output "$WORK/pp_consolidated" --dtype float32 \
  >"$WORK/pp_consolidate.out" 2>&1 || fail "dsconsolidate --format hf of the PP 2 x TP 2 checkpoint: $(cat "$WORK/pp_consolidate.out")"
"$PY" "$HF/same_tensors.py" "$WORK/tiny" "$WORK/pp_consolidated" --label "PP 2 x TP 2 checkpoint by dsconsolidate" ||
  fail "dsconsolidate's folder from the PP 2 x TP 2 checkpoint differs from the folder"
same_partition llama_export 4 --override ds_config.pipeline.stages=2 --override ds_config.tensor_parallel.tp_size=2 \
  --override train.steps=3 --override train.lr=0 --override train.warmup_steps=0 --override train.min_lr=0 \
  --override "export.hf_dir=$WORK/pp_hf" --override export.dtype=float32
pass "a Hugging Face Llama folder trains at PP 2 like one rank, and exports back exactly from PP 2 x TP 2 (at the job's end and by dsconsolidate from its checkpoint)"
# With LoRA on q_proj the embedding and the head are frozen: cut into 4
# stages, one stage holds nothing to train. The ranks refuse that cut, and
# --dry_run names the same stage before anything starts.
LORA_PP4=(--override ds_config.pipeline.stages=4 --override lora.r=4 --override 'lora.target_modules=[q_proj]')
"$DSLAUNCH" --dry_run --num_gpus 4 "${COMMON[@]}" "${LORA_PP4[@]}" "$CONFIG" >"$WORK/lora_pp4.dry" 2>&1 ||
  fail "--dry_run of LoRA at PP 4: $(tail -3 "$WORK/lora_pp4.dry")"
refused=$(grep -oE "the ranks will refuse this cut: pipeline stage [0-9]+ would hold no trainable parameter" "$WORK/lora_pp4.dry") ||
  fail "--dry_run did not say the LoRA cut will be refused: $(grep -A2 '^pipeline:' "$WORK/lora_pp4.dry")"
if "$DSLAUNCH" --num_gpus 4 "${COMMON[@]}" "${LORA_PP4[@]}" "$CONFIG" >"$WORK/lora_pp4.out" 2>"$WORK/lora_pp4.err"; then
  fail "a LoRA job cut with a stage that trains nothing exited 0"
fi
grep -q "${refused#the ranks will refuse this cut: }" "$WORK/lora_pp4.err" ||
  fail "the ranks refused otherwise than --dry_run said ($refused): $(grep -m1 'root cause' "$WORK/lora_pp4.err")"
pass "--dry_run prints the partition every rank then cuts (GPT 1F1B and interleaved, Llama at PP 2 and PP 2 x TP 2), and says when the ranks will refuse it"
