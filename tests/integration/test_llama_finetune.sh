#!/usr/bin/env bash
# A Llama-family model from a Hugging Face folder, fine-tuned through dslaunch
# and exported back (issue 15):
#  - a tiny folder (GQA, llama3 rope scaling, untied head; sharded) written by
#    tests/hf/make_tiny_llama.py loads, and 1 rank at ZeRO-0 and 2 ranks at
#    ZeRO-1 and ZeRO-3 give the same losses;
#  - with lr 0 the export at ZeRO-3 on 2 ranks (float32) holds exactly the
#    tensors the folder came with;
#  - a trained export loads in the independent reference (tests/hf/) and its
#    logits match dsgen's on the same folder; stop and resume are bit for bit;
#  - a TP 2 job's checkpoint consolidates and generates, on 1 rank and 2;
#  - a broken folder is refused naming the file and tensor, before any step.
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?DSRANK must point at the dsrank binary}"
: "${DSGEN:?DSGEN must point at the dsgen binary}"
: "${DSCONSOLIDATE:?DSCONSOLIDATE must point at the dsconsolidate binary}"
HF=$(cd "$(dirname "$0")/../hf" && pwd)
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/llama-tiny.cfg
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" -c 'import torch' 2>/dev/null || fail "$PY has no torch (scripts/setup.sh installs python3-torch)"
"$PY" "$HF/make_tiny_llama.py" "$WORK/tiny" llama3_gqa --shards 2 --seed 3
COMMON=(--override "model.from=$WORK/tiny" --override "data.prepared=$WORK/data/fortunes"
  --override train.eval_interval=0 --override 'checkpoint.dir=""' --override 'export.hf_dir=""'
  --override train.global_batch_size=8)


# 1. One rank, ZeRO-0; two ranks at ZeRO-1 and ZeRO-3: the same losses.
run_job z0 1 --override train.steps=10 --override train.micro_batch_size=8
grep -q "dsrank: loaded $WORK/tiny" "$WORK/z0.out" || fail "no 'loaded' line"
grep -q "dsrank: llama with" "$WORK/z0.out" || fail "not built as a llama"
for stage in 1 3; do
  run_job z$stage 2 --override train.steps=10 --override train.micro_batch_size=4 \
    --override ds_config.zero_optimization.stage=$stage \
    --override ds_config.zero_optimization.stage3_param_persistence_threshold=0
  same_losses z0 z$stage "ZeRO-$stage on 2 ranks vs ZeRO-0 on 1"
done
awk 'NR <= 2 { first += $2 } { last2[NR % 2] = $2 } END { exit !((last2[0] + last2[1]) < first) }' "$WORK/z0.tsv" ||
  fail "the loss did not fall over 10 steps"
pass "Llama from a Hugging Face folder: ZeRO-0 on 1 rank, ZeRO-1 and ZeRO-3 on 2 give the same losses; the loss falls"

# 2. lr 0: the export at ZeRO-3 on 2 ranks is the folder's own tensors, exactly.
run_job roundtrip 2 --override train.steps=3 --override train.micro_batch_size=4 --override train.lr=0 --override train.warmup_steps=0 \
  --override train.min_lr=0 --override ds_config.zero_optimization.stage=3 \
  --override ds_config.zero_optimization.stage3_param_persistence_threshold=0 \
  --override "export.hf_dir=$WORK/roundtrip_hf" --override export.dtype=float32 --override export.max_shard_size=100KB
ls "$WORK/roundtrip_hf"/model-00001-of-*.safetensors >/dev/null || fail "the export is not sharded at 100KB"
"$PY" "$HF/same_tensors.py" "$WORK/tiny" "$WORK/roundtrip_hf" --label "round trip" --same_dtype ||
  fail "the exported tensors differ from the folder's"
"$PY" - "$WORK/roundtrip_hf" <<'PYEOF' || fail "the exported config.json lost its rope scaling or key/value heads"
import json, sys
config = json.load(open(sys.argv[1] + "/config.json"))
assert config["rope_scaling"]["rope_type"] == "llama3" and config["num_key_value_heads"] == 4, config
PYEOF
pass "export at ZeRO-3 on 2 ranks: every tensor identical to the loaded folder"

# 3. A trained bf16 export: the reference computes dsgen's logits from it.
run_job trained 2 --override train.steps=6 --override train.micro_batch_size=4 \
  --override ds_config.zero_optimization.stage=2 --override "export.hf_dir=$WORK/trained_hf"
grep -q '"torch_dtype": "bfloat16"' "$WORK/trained_hf/config.json" || fail "the export is not bfloat16"
"$DSGEN" --model "$WORK/trained_hf" --prompt_ids 1,20,300,41,5 --max_new_tokens 0 --dump_logits "$WORK/trained.logits" \
  >"$WORK/dsgen.out" 2>&1 || fail "dsgen on the export: $(cat "$WORK/dsgen.out")"
"$PY" "$HF/llama_reference.py" logits "$WORK/trained_hf" 1,20,300,41,5 --compare "$WORK/trained.logits" \
  --atol 2e-5 --rtol 2e-5 || fail "the reference disagrees with dsgen on the exported folder"
pass "the trained export (bf16) loads in the reference and gives dsgen's logits"

# 4. Stop after step 4, resume to 8: bit-identical losses (ZeRO-3, 2 ranks).
Z3=(--override train.steps=8 --override train.micro_batch_size=4 --override ds_config.zero_optimization.stage=3
  --override checkpoint.interval=4)
run_job straight 2 "${Z3[@]}" --override "checkpoint.dir=$WORK/ck_straight" --override "export.hf_dir=$WORK/straight_hf" \
  --override export.dtype=float32
set +e
"$DSLAUNCH" --num_gpus 2 "${COMMON[@]}" "${Z3[@]}" --override "checkpoint.dir=$WORK/ck_resume" "$CONFIG" \
  --loss_log "$WORK/resumed.tsv" --exit_at_step 4 >"$WORK/first.out" 2>&1
code=$?
set -e
((code == 1)) || fail "the first half should stop with 1 after step 4, got $code"
run_job second 2 "${Z3[@]}" --override "checkpoint.dir=$WORK/ck_resume"
cat "$WORK/second.tsv" >>"$WORK/resumed.tsv"
cmp "$WORK/straight.tsv" "$WORK/resumed.tsv" || fail "resumed losses differ: $(diff "$WORK/straight.tsv" "$WORK/resumed.tsv" | head -4)"
pass "stop at 4, resume to 8 at ZeRO-3: every loss bit-identical"

# 5. dsconsolidate --format hf: the ZeRO-3 checkpoint of step 8 as a Hugging
#    Face folder holds exactly what the job exported at its end (fp32).
"$DSCONSOLIDATE" "$WORK/ck_straight" --format hf --hf_from "$WORK/tiny" --dtype float32 --max_shard_size 200KB \
  --output "$WORK/consolidated_hf" >"$WORK/consolidate.out" 2>&1 || fail "dsconsolidate --format hf: $(cat "$WORK/consolidate.out")"
"$PY" "$HF/same_tensors.py" "$WORK/straight_hf" "$WORK/consolidated_hf" --label "consolidated" ||
  fail "the consolidated folder differs from the job's export"
cmp "$WORK/straight_hf/config.json" "$WORK/consolidated_hf/config.json" || fail "config.json differs"
pass "dsconsolidate --format hf: the checkpoint as a Hugging Face folder equals the job's own export"

# 5b. Generation reads the ZeRO-3 checkpoint of 2 ranks in place (no
#     conversion): the logits and greedy tokens of the consolidated folder.
for source in checkpoint folder; do
  if [[ $source == checkpoint ]]; then args=(--model "$WORK/tiny" --checkpoint "$WORK/ck_straight"); else args=(--model "$WORK/consolidated_hf"); fi
  mkdir -p "$WORK/logits_$source"
  "$DSGEN" "${args[@]}" --prompt_ids 1,20,300,41,5 --max_new_tokens 0 --dump_logits "$WORK/logits_$source/model.safetensors" \
    >"$WORK/gen_$source.out" 2>&1 || fail "dsgen from the $source: $(cat "$WORK/gen_$source.out")"
  "$DSGEN" "${args[@]}" --prompt_ids 1,20,300,41,5 --max_new_tokens 12 >"$WORK/gen_$source.ids" 2>&1 ||
    fail "dsgen from the $source: $(cat "$WORK/gen_$source.ids")"
done
"$PY" "$HF/same_tensors.py" "$WORK/logits_checkpoint" "$WORK/logits_folder" --label "logits" ||
  fail "dsgen --checkpoint and the consolidated folder give different logits"
cmp -s "$WORK/gen_checkpoint.ids" "$WORK/gen_folder.ids" ||
  fail "greedy tokens differ: $(cat "$WORK/gen_checkpoint.ids") vs $(cat "$WORK/gen_folder.ids")"
"$DSGEN" --model "$WORK/tiny" --checkpoint "$WORK/ck_straight" --checkpoint_tag nope --prompt_ids 1 >"$WORK/tag.out" 2>&1 &&
  fail "dsgen with a missing tag ran"
grep -q "nope" "$WORK/tag.out" || fail "a missing tag is not named: $(cat "$WORK/tag.out")"
pass "dsgen --checkpoint reads the ZeRO-3 checkpoint of 2 ranks in place: the consolidated folder's logits and tokens ($(cat "$WORK/gen_checkpoint.ids"))"

# 5c. A tensor-parallel job's checkpoint (TP 2, Note [Tensor-parallel
#     checkpoints]): dsconsolidate joins the slices into a folder, dsgen
#     reads the checkpoint in place as that folder, and dsgen split over 2
#     ranks reads it as one rank does.
run_job tp2 2 --override ds_config.tensor_parallel.tp_size=2 --override train.steps=4 --override train.warmup_steps=2 \
  --override train.micro_batch_size=8 \
  --override "checkpoint.dir=$WORK/ck_tp" --override checkpoint.interval=4
"$DSCONSOLIDATE" "$WORK/ck_tp" --format hf --hf_from "$WORK/tiny" --dtype float32 --output "$WORK/tp_hf" \
  >"$WORK/consolidate_tp.out" 2>&1 || fail "dsconsolidate of the TP 2 checkpoint: $(cat "$WORK/consolidate_tp.out")"
TP_PROMPT=(--prompt_ids 1,20,300,41,5 --max_new_tokens 12 --print_logprobs)
"$DSGEN" --model "$WORK/tp_hf" "${TP_PROMPT[@]}" >"$WORK/tp_folder.out" 2>&1 || fail "dsgen on the folder: $(cat "$WORK/tp_folder.out")"
"$DSGEN" --model "$WORK/tiny" --checkpoint "$WORK/ck_tp" "${TP_PROMPT[@]}" >"$WORK/tp_one.out" 2>"$WORK/tp_one.err" ||
  fail "dsgen --checkpoint of the TP 2 checkpoint: $(cat "$WORK/tp_one.err")"
cmp -s "$WORK/tp_folder.out" "$WORK/tp_one.out" ||
  fail "dsgen --checkpoint and the consolidated folder differ: $(paste "$WORK/tp_folder.out" "$WORK/tp_one.out" | head -3)"
"$DSLAUNCH" --num_gpus 2 --no_prefix "$DSGEN" --model "$WORK/tiny" --checkpoint "$WORK/ck_tp" "${TP_PROMPT[@]}" \
  >"$WORK/tp_two.out" 2>"$WORK/tp_two.err" || fail "dsgen on 2 ranks with --checkpoint: $(tail -3 "$WORK/tp_two.err")"
awk 'NR == FNR { id[FNR] = $1; lp[FNR] = $2; n = FNR; next }
  { if ($1 != id[FNR]) bad = 1; d = $2 - lp[FNR]; if (d < 0) d = -d; if (d > 1e-5) bad = 1; m = FNR }
  END { exit bad || m != n || n == 0 }' "$WORK/tp_one.out" "$WORK/tp_two.out" ||
  fail "2 ranks and one rank differ on the TP 2 checkpoint: $(paste "$WORK/tp_one.out" "$WORK/tp_two.out" | head -3)"
pass "a TP 2 checkpoint: dsconsolidate's folder, dsgen --checkpoint and dsgen on 2 ranks give the same tokens"

# 6. A broken folder: refused naming the file and tensor; no step runs.
cp -r "$WORK/tiny" "$WORK/broken"
sed -i 's/"intermediate_size": 176/"intermediate_size": 160/' "$WORK/broken/config.json"
set +e
"$DSLAUNCH" --num_gpus 1 "${COMMON[@]}" --override "model.from=$WORK/broken" --override train.steps=6 "$CONFIG" \
  --loss_log "$WORK/broken.tsv" >"$WORK/broken.out" 2>&1
code=$?
set -e
((code != 0)) || fail "a broken folder trained"
grep -q "model-00001-of-00002.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' has shape \[176, 64\] but $WORK/broken/config.json gives \[160, 64\]" \
  "$WORK/broken.out" || fail "the error does not name the file and tensor: $(grep -m1 dsrank "$WORK/broken.out")"
[[ ! -s $WORK/broken.tsv ]] || fail "steps ran with a broken folder"
pass "a folder whose tensors disagree with its config.json is refused naming the file and tensor"
