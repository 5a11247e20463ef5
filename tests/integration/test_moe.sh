#!/usr/bin/env bash
# Mixture of experts through dslaunch (issue 18): gpt-tiny with its second
# block an expert block (4 experts, top-2, RTS and the sampled second expert
# on, as DeepSpeed's defaults) on 4 ranks gives the per-step losses of expert
# parallelism 1 at ep 2 (ZeRO-2, the seed's moe block) and ep 4 (ZeRO-1,
# moe_expert_parallel_size); telemetry prints each expert layer's routing; an
# ep 2 checkpoint resumes at ep 4 with the losses of the uninterrupted run;
# cut into 2 pipeline stages it gives one rank's losses;
# conflicting expert settings are refused at their keys before anything
# starts; a Mixtral folder trains at EP 2 and exports back exactly from EP 1
# and from EP 2.
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?DSRANK must point at the dsrank binary}"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg
COMMON=(--override "data.prepared=$WORK/data/fortunes" --override train.eval_interval=0 --override 'checkpoint.dir=""'
  --override train.global_batch_size=8 --override train.steps=8 --override train.warmup_steps=2
  --override train.micro_batch_size=2 --override model.moe.num_experts=4 --override model.moe.top_k=2
  --override model.moe.every=2 --override ds_config.zero_optimization.stage=2)

run_job ep1 4
run_job ep2 4 --override ds_config.moe.enabled=true --override ds_config.moe.ep_size=2 \
  --override model.moe.telemetry=true --override ds_config.steps_per_print=4 \
  --override ds_config.csv_monitor.enabled=true --override "ds_config.csv_monitor.output_path=$WORK/mon" \
  --override ds_config.csv_monitor.job_name=moe
same_losses ep1 ep2 "EP 2 x DP 2 (ZeRO-2) vs EP 1 x DP 4"
run_job ep4 4 --override ds_config.moe_expert_parallel_size=4 --override ds_config.zero_optimization.stage=1
same_losses ep1 ep4 "EP 4 (ZeRO-1) vs EP 1 x DP 4"
pass "EP 2 and EP 4 give the losses of EP 1"

sed 's/^\[[^]]*\] //' "$WORK/ep2.out" >"$WORK/ep2.log"
grep -Eq "^  moe blocks\.1\.moe: tokens per expert \[[0-9]+ [0-9]+ [0-9]+ [0-9]+\] dropped [0-9.]+% aux_loss [0-9.]+" \
  "$WORK/ep2.log" || fail "no telemetry line: $(grep -m3 'moe' "$WORK/ep2.log")"
# 4 ranks x 2 rows x 64 tokens x 2 choices, less what was dropped.
awk '/^  moe blocks.1.moe: tokens per expert/ { gsub(/[\[\]]/, ""); s = $6 + $7 + $8 + $9;
  if (s <= 0 || s > 4 * 2 * 64 * 2) bad = 1; n++ } END { exit bad || n != 2 }' "$WORK/ep2.log" ||
  fail "telemetry counts out of range: $(grep 'moe blocks' "$WORK/ep2.log")"
# The monitors get the same routing at every step (x: samples, 8 a step);
# at the printed steps 4 and 8 it is the step line's.
for metric in dropped_fraction aux_loss tokens_expert_0 tokens_expert_3; do
  file="$WORK/mon/moe/MoE_blocks.1.moe_$metric.csv"
  [[ -f $file && $(head -n 1 "$file") == "step,$metric" && $(wc -l <"$file") == 9 ]] ||
    fail "the csv monitor has no MoE $metric for each step: $(ls "$WORK/mon/moe" 2>&1 | head -20)"
done
for step in 4 8; do
  printed=$(awk -v n="$step" '/^step=/ { s = $1; sub("step=", "", s) } /^  moe blocks.1.moe: tokens per expert/ && s == n {
    gsub(/[\[\]]/, ""); print $6, $7, $8, $9 }' "$WORK/ep2.log")
  logged=$(for e in 0 1 2 3; do awk -F, -v x=$((step * 8)) '$1 == x { printf "%d ", $2 }' \
    "$WORK/mon/moe/MoE_blocks.1.moe_tokens_expert_$e.csv"; done)
  [[ -n $printed && "$printed " == "$logged" ]] || fail "step $step: the line says [$printed], the monitor [$logged]"
done
pass "model.moe.telemetry prints tokens per expert, the dropped share and the auxiliary loss; the monitors log them each step"

# Note [Experts in pipeline stages]: the experts' blocks cut into 2 stages
# (1F1B, and interleaved with every block recomputed) give one rank's losses
# (the same micro-batches of 2 rows, so the same routing and auxiliary
# losses; routing without random draws, which a stage makes in another order).
DETERMINISTIC=(--override model.moe.use_rts=false --override model.moe.second_expert_sampling=false
  --override model.moe.telemetry=true --override ds_config.steps_per_print=4)
run_job one 1 "${DETERMINISTIC[@]}"
run_job pp2 2 "${DETERMINISTIC[@]}" --override ds_config.pipeline.stages=2
same_losses one pp2 "MoE at PP 2 (1F1B) vs 1 rank"
# The routing telemetry is the stage's that holds the layer, as one rank's.
diff <(grep -o 'moe blocks.1.moe: .*' "$WORK/one.out") <(grep -o 'moe blocks.1.moe: .*' "$WORK/pp2.out") ||
  fail "MoE telemetry at PP 2 differs from one rank's"
[[ $(grep -c 'moe blocks.1.moe: ' "$WORK/pp2.out") == 2 ]] || fail "no MoE telemetry at PP 2: $(grep -m3 moe "$WORK/pp2.out")"
run_job pp2v2 2 "${DETERMINISTIC[@]}" --override ds_config.pipeline.stages=2 \
  --override ds_config.pipeline.schedule=interleaved --override ds_config.pipeline.virtual_stages=2 \
  --override ds_config.pipeline.activation_checkpoint_interval=1
same_losses one pp2v2 "MoE at PP 2 (interleaved, recomputed) vs 1 rank"
pass "experts in 2 pipeline stages (1F1B, interleaved with recomputation) give the losses of one rank"

# An EP 2 checkpoint at step 4 resumed at EP 4: steps 5-8 as uninterrupted.
rm -rf "$WORK/ckpt"
run_job saved 4 --override ds_config.moe.enabled=true --override ds_config.moe.ep_size=2 \
  --override "checkpoint.dir=$WORK/ckpt" --override checkpoint.interval=4 --override train.steps=4
run_job resumed 4 --override ds_config.moe_expert_parallel_size=4 --override ds_config.zero_optimization.stage=1 \
  --override "checkpoint.dir=$WORK/ckpt" --override checkpoint.interval=4
grep -q "resumed from $WORK/ckpt/global_step4" "$WORK/resumed.out" || fail "did not resume: $(grep dsrank "$WORK/resumed.out")"
awk 'NR == FNR { a[$1] = $2; next } ($1 in a) { n++; d = a[$1] - $2; if (d < 0) d = -d; if (d / a[$1] > 1e-4) bad = 1 }
  END { exit bad || n != 4 }' "$WORK/ep1.tsv" "$WORK/resumed.tsv" || fail "resumed losses differ from the uninterrupted run's"
pass "an EP 2 checkpoint resumes at EP 4"

refused() {  # LABEL EXPECTED-MESSAGE [dslaunch arguments...]
  local label=$1 expected=$2
  shift 2
  if "$DSLAUNCH" --num_gpus 4 "${COMMON[@]}" "$@" "$CONFIG" >"$WORK/$label.out" 2>"$WORK/$label.err"; then
    fail "$label: the job ran"
  fi
  grep -qF -- "$expected" "$WORK/$label.err" || fail "$label: $(head -c 600 "$WORK/$label.err")"
  ! grep -q "^step=" "$WORK/$label.out" || fail "$label: a step ran"
}
refused uneven "model.moe.num_experts: 4 is not a multiple of the expert-parallel size (moe.ep_size=3)" \
  --override ds_config.moe.enabled=true --override ds_config.moe.ep_size=3
refused conflict "moe.ep_size: 2 disagrees with moe_expert_parallel_size=4" \
  --override ds_config.moe.enabled=true --override ds_config.moe.ep_size=2 --override ds_config.moe_expert_parallel_size=4
refused zero3 "zero_optimization.stage: 3 with expert parallelism (2)" \
  --override ds_config.moe_expert_parallel_size=2 --override ds_config.zero_optimization.stage=3
refused pipeline "moe_expert_parallel_size: 2: expert parallelism with pipeline.stages=2 is not yet supported" \
  --override ds_config.moe_expert_parallel_size=2 --override ds_config.pipeline.stages=2
pass "conflicting expert settings are refused at their keys before any step"

# A Mixtral folder (4 experts, top-2, every layer): fine-tuned at EP 2 as at
# EP 1; with lr 0 the export from EP 1 holds exactly the folder's tensors and
# its config.json keeps the experts; export at EP 2 is refused by name.
HF=$(cd "$(dirname "$0")/../hf" && pwd)
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" "$HF/make_tiny_llama.py" "$WORK/mixtral" mixtral --shards 2 --seed 3
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/llama-tiny.cfg
COMMON=(--override "model.from=$WORK/mixtral" --override "data.prepared=$WORK/data/fortunes"
  --override train.eval_interval=0 --override 'checkpoint.dir=""' --override 'export.hf_dir=""'
  --override train.global_batch_size=8 --override train.steps=6 --override train.micro_batch_size=2
  --override ds_config.zero_optimization.stage=2)
run_job mixtral_ep1 4
run_job mixtral_ep2 4 --override ds_config.moe_expert_parallel_size=2
same_losses mixtral_ep1 mixtral_ep2 "Mixtral folder at EP 2 x DP 2 vs EP 1 x DP 4"
run_job mixtral_export 2 --override train.steps=3 --override train.lr=0 --override train.warmup_steps=0 \
  --override train.min_lr=0 --override "export.hf_dir=$WORK/mixtral_hf" --override export.dtype=float32
"$PY" "$HF/same_tensors.py" "$WORK/mixtral" "$WORK/mixtral_hf" --label "Mixtral export" ||
  fail "the Mixtral export differs from the folder"
grep -q '"num_local_experts": 4' "$WORK/mixtral_hf/config.json" || fail "the export's config.json lost the experts"
# At EP 2 x DP 2 (ZeRO-2) each rank holds 2 of the 4 experts of each
# layer: the export gathers them and writes the folder back exactly.
run_job mixtral_ep2_export 4 --override ds_config.moe_expert_parallel_size=2 --override train.steps=3 \
  --override train.lr=0 --override train.warmup_steps=0 --override train.min_lr=0 \
  --override "export.hf_dir=$WORK/mixtral_ep2_hf" --override export.dtype=float32
"$PY" "$HF/same_tensors.py" "$WORK/mixtral" "$WORK/mixtral_ep2_hf" --label "Mixtral export at EP 2" ||
  fail "the Mixtral export at EP 2 differs from the folder"
"$PY" - "$WORK/mixtral_hf/model.safetensors" "$WORK/mixtral_ep2_hf/model.safetensors" <<'PYEOF' ||
import json, struct, sys
def names(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        return [k for k in json.loads(f.read(size)) if k != "__metadata__"]
a, b = names(sys.argv[1]), names(sys.argv[2])
assert a == b, "first difference at %d" % next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
PYEOF
  fail "the EP 2 export orders its tensors unlike the EP 1 export"
pass "a Mixtral folder trains at EP 2 like EP 1 and exports back exactly from EP 1 and from EP 2 x DP 2"
