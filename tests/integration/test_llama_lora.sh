#!/usr/bin/env bash
# LoRA on a Llama-family model from a Hugging Face folder (issue 15, Note
# [LoRA] in runtime/model/lora_linear.h):
#  - 1 rank at ZeRO-0 and 2 ranks at ZeRO-2 and ZeRO-3 give the same losses,
#    and the loss falls; the frozen base has no master weights or optimizer
#    state, and at ZeRO-3 each rank keeps its half of it (memory_breakdown);
#  - at ZeRO-3 each rank reads only its half of the folder, and its peak
#    host memory is well below ZeRO-2's, which builds the model whole;
#  - the PEFT adapter folder, applied on the base by the independent
#    reference (tests/hf/llama_reference.py --adapter), gives the logits dsgen
#    computes from the merged export, both written at ZeRO-3 on 2 ranks, and
#    dsgen --adapter (unmerged, on the base) gives the reference's logits;
#  - dsconsolidate --format hf of its checkpoint (--lora_alpha) writes the
#    job's merged export;
#  - tensor parallelism (Note [LoRA under tensor parallelism]): TP 2 with
#    sequence parallelism gives the ZeRO-3 run's losses, adapter folder and
#    merged export, and dsconsolidate joins its checkpoint into that export;
#  - pipeline parallelism: 2 stages give the ZeRO-3 run's losses, adapter
#    folder and merged export;
#  - stop and resume are bit for bit;
#  - a target that matches no projection is refused by name; nothing runs.
source "$(dirname "$0")/lib.sh"
: "${DSGEN:?DSGEN must point at the dsgen binary}"
: "${DSCONSOLIDATE:?DSCONSOLIDATE must point at the dsconsolidate binary}"
HF=$(cd "$(dirname "$0")/../hf" && pwd)
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/llama-tiny.cfg
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" -c 'import torch' 2>/dev/null || fail "$PY has no torch (scripts/setup.sh installs python3-torch)"
"$PY" "$HF/make_tiny_llama.py" "$WORK/tiny" llama3_gqa --seed 4
COMMON=(--override "model.from=$WORK/tiny" --override "data.prepared=$WORK/data/fortunes"
  --override train.eval_interval=0 --override 'checkpoint.dir=""' --override 'export.hf_dir=""'
  --override train.global_batch_size=8 --override train.lr=1e-2
  --override lora.r=4 --override lora.lora_alpha=8 --override 'lora.target_modules=[q_proj, k_proj, v_proj, o_proj]')


# 1. The same losses at ZeRO-0 (1 rank), ZeRO-2 and ZeRO-3 (2 ranks); the loss falls.
run_job z0 1 --override train.steps=10 --override train.micro_batch_size=8
projections=$(sed -nE 's/.*dsrank: LoRA r=4 alpha=8 on ([0-9]+) projections.*/\1/p' "$WORK/z0.out")
layers=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["num_hidden_layers"])' "$WORK/tiny/config.json")
[[ $projections == $((4 * layers)) ]] || fail "LoRA on '$projections' projections, expected q/k/v/o of $layers layers: $(grep -m3 dsrank "$WORK/z0.out")"
for stage in 2 3; do
  run_job z$stage 2 --override train.steps=10 --override train.micro_batch_size=4 \
    --override ds_config.zero_optimization.stage=$stage \
    --override ds_config.zero_optimization.stage3_param_persistence_threshold=0
  same_losses z0 z$stage "LoRA: ZeRO-$stage on 2 ranks vs ZeRO-0 on 1"
done
awk 'NR <= 2 { first += $2 } { last2[NR % 2] = $2 } END { exit !((last2[0] + last2[1]) < first) }' "$WORK/z0.tsv" ||
  fail "the loss did not fall over 10 steps with LoRA"
pass "LoRA: ZeRO-0 on 1 rank, ZeRO-2 and ZeRO-3 on 2 give the same losses; the loss falls"

# 2. bf16: the frozen base is 16-bit parameters only; master weights and
#    optimizer state are the adapters' (4 + 8 bytes per trainable element).
run_job memory 1 --override train.steps=3 --override train.warmup_steps=2 --override train.micro_batch_size=8 --override train.precision=bf16 \
  --override ds_config.memory_breakdown=true --override ds_config.steps_per_print=1
trainable=$(sed -nE 's/.*LoRA r=4 alpha=8 on [0-9]+ projections: ([0-9]+) trainable parameters, ([0-9]+) frozen.*/\1/p' "$WORK/memory.out")
frozen=$(sed -nE 's/.*LoRA r=4 alpha=8 on [0-9]+ projections: ([0-9]+) trainable parameters, ([0-9]+) frozen.*/\2/p' "$WORK/memory.out")
[[ -n $trainable && -n $frozen ]] || fail "no LoRA summary"
line=$(grep -m1 "memory: parameters" "$WORK/memory.out") || fail "no memory_breakdown line"
[[ $line =~ master\ weights\ ([0-9]+)\ B.*optimizer\ state\ ([0-9]+)\ B.*frozen\ parameters\ ([0-9]+)\ B ]] ||
  fail "unexpected memory line: $line"
((BASH_REMATCH[1] == 4 * trainable && BASH_REMATCH[2] == 8 * trainable && BASH_REMATCH[3] == 2 * frozen)) ||
  fail "memory: $line; expected master $((4 * trainable)), optimizer $((8 * trainable)), frozen $((2 * frozen)) bytes"
pass "LoRA memory: master weights and Adam state for the $trainable adapter elements only; $frozen frozen in bf16"
#    At ZeRO-3 each of 2 ranks keeps half the frozen base (Note [Frozen
#    parameters at ZeRO-3]): each unit is padded to an even element count.
run_job memory3 2 --override train.steps=3 --override train.warmup_steps=2 --override train.micro_batch_size=4 \
  --override train.precision=bf16 --override ds_config.zero_optimization.stage=3 \
  --override ds_config.zero_optimization.stage3_param_persistence_threshold=0 \
  --override ds_config.memory_breakdown=true --override ds_config.steps_per_print=1
line=$(grep -m1 "memory: parameters" "$WORK/memory3.out") || fail "no memory_breakdown line at ZeRO-3"
[[ $line =~ frozen\ parameters\ ([0-9]+)\ B ]] || fail "unexpected memory line: $line"
((BASH_REMATCH[1] >= frozen && BASH_REMATCH[1] <= frozen + 2 * (layers + 2))) ||
  fail "ZeRO-3 on 2 ranks: $line; expected half of the $((2 * frozen)) frozen bytes"
pass "LoRA at ZeRO-3 on 2 ranks: each keeps ${BASH_REMATCH[1]} of the $((2 * frozen)) bytes of the frozen base"

# 2b. Shard-only loading (Note [Shard-only loading]): at ZeRO-3 no rank builds
#     the model whole; each reads its own pieces of the folder. On a 271 MB
#     (fp32) folder, rank 0 of 2 reads about half of its bytes, and its peak
#     host memory when the engine is ready is well below ZeRO-2's, whose
#     ranks build and load the whole model (the module, and every page of the
#     folder through the mapping).
"$PY" "$HF/make_tiny_llama.py" "$WORK/wide" llama2 --hidden 768 --layers 6 --heads 12 --kv_heads 12 \
  --intermediate 2048 --vocab 16384 --seed 5
folder_bytes=$(du -cb "$WORK"/wide/*.safetensors | tail -1 | cut -f1)
peak_mib() {  # NAME: rank 0's peak host memory when its engine was ready
  sed -nE 's/.*engine ready; rank 0.s peak host memory so far ([0-9]+) MiB.*/\1/p' "$WORK/$1.out"
}
for stage in 2 3; do
  run_job wide$stage 2 --override "model.from=$WORK/wide" --override train.steps=3 --override train.warmup_steps=2 \
    --override train.micro_batch_size=4 \
    --override ds_config.zero_optimization.stage=$stage \
    --override ds_config.zero_optimization.stage3_param_persistence_threshold=0
done
line=$(grep -m1 "read .* of the .* bytes of" "$WORK/wide3.out") || fail "no shard-only line at ZeRO-3: $(grep -m4 dsrank: "$WORK/wide3.out")"
[[ $line =~ read\ ([0-9]+)\ of\ the\ ([0-9]+)\ bytes ]] || fail "unexpected line: $line"
read_bytes=${BASH_REMATCH[1]}
((BASH_REMATCH[2] > folder_bytes * 99 / 100 && read_bytes >= BASH_REMATCH[2] / 2 - BASH_REMATCH[2] / 100 &&
  read_bytes <= BASH_REMATCH[2] / 2 + BASH_REMATCH[2] / 100)) ||
  fail "rank 0 of 2 read $read_bytes of ${BASH_REMATCH[2]} bytes (folder files: $folder_bytes); expected half"
grep -q "each rank reads only its ZeRO-3 pieces" "$WORK/wide3.out" || fail "no 'checked' line at ZeRO-3"
! grep -q "each rank reads only" "$WORK/wide2.out" || fail "ZeRO-2 claims shard-only loading"
peak2=$(peak_mib wide2) peak3=$(peak_mib wide3)
[[ -n $peak2 && -n $peak3 ]] || fail "no 'engine ready' line: $(grep -m4 dsrank: "$WORK/wide3.out")"
model_mib=$((folder_bytes >> 20))
((peak3 + model_mib / 3 < peak2)) ||
  fail "rank 0's peak host memory at ZeRO-3 is $peak3 MiB, at ZeRO-2 $peak2 MiB: not a third of the $model_mib MiB model less"
pass "shard-only loading at ZeRO-3: rank 0 of 2 read $read_bytes of ${BASH_REMATCH[2]} bytes; peak host memory $peak3 MiB (ZeRO-2: $peak2 MiB, model $model_mib MiB)"

# 3. The adapter (PEFT) and the merged model, written at ZeRO-3 on 2 ranks:
#    the reference applies the adapter on the base and gets dsgen's logits of
#    the merged folder.
run_job export 2 --override train.steps=6 --override train.micro_batch_size=4 --override ds_config.zero_optimization.stage=3 \
  --override ds_config.zero_optimization.stage3_param_persistence_threshold=0 --override export.dtype=float32 \
  --override "export.adapter_dir=$WORK/adapter" --override "export.hf_dir=$WORK/merged" \
  --override "checkpoint.dir=$WORK/ck_export" --override checkpoint.interval=6
grep -q '"peft_type": "LORA"' "$WORK/adapter/adapter_config.json" || fail "no PEFT adapter_config.json"
"$PY" - "$HF" "$WORK/adapter" "$projections" <<'PYEOF' || fail "the adapter file is not what PEFT reads"
import sys
sys.path.insert(0, sys.argv[1])
import safetensors_io
t = safetensors_io.read(sys.argv[2] + "/adapter_model.safetensors")
assert len(t) == 2 * int(sys.argv[3]), sorted(t)
assert all(k.startswith("base_model.model.model.layers.") for k in t), sorted(t)[:3]
assert all(v.numel() > 0 for v in t.values()), "an empty tensor"
assert any(v.abs().sum() > 0 for k, v in t.items() if "lora_B" in k), "lora_B never trained"
print("adapter: %d tensors, PEFT names, none empty" % len(t))
PYEOF
"$DSGEN" --model "$WORK/merged" --prompt_ids 1,20,300,41,5 --max_new_tokens 0 --dump_logits "$WORK/merged.logits" \
  >"$WORK/dsgen.out" 2>&1 || fail "dsgen on the merged export: $(cat "$WORK/dsgen.out")"
"$PY" "$HF/llama_reference.py" logits "$WORK/tiny" 1,20,300,41,5 --adapter "$WORK/adapter" --compare "$WORK/merged.logits" \
  --atol 2e-5 --rtol 2e-5 >"$WORK/reference.out" 2>&1 ||
  fail "the reference (base + adapter) disagrees with dsgen on the merged export: $(cat "$WORK/reference.out")"
"$PY" "$HF/llama_reference.py" logits "$WORK/tiny" 1,20,300,41,5 --compare "$WORK/merged.logits" \
  --atol 2e-5 --rtol 2e-5 >/dev/null 2>&1 && fail "the merged export gives the base's logits: the adapter did nothing"
pass "PEFT adapter + base in the reference = the merged export in dsgen (fp32, written at ZeRO-3 on 2 ranks)"

# 3b. The same job's checkpoint through dsconsolidate --format hf (Note [LoRA
#     checkpoints to Hugging Face]): refused without lora_alpha (it holds
#     adapters only), and with it the job's own merged export, tensor for tensor.
if "$DSCONSOLIDATE" "$WORK/ck_export" --format hf --hf_from "$WORK/tiny" --output "$WORK/consolidated" \
  --dtype float32 >"$WORK/consolidate.out" 2>&1; then
  fail "dsconsolidate --format hf of a LoRA checkpoint without --lora_alpha wrote a folder"
fi
grep -q "holds the LoRA adapters of $projections projections and not the frozen base weights: give --lora_alpha" \
  "$WORK/consolidate.out" || fail "no refusal naming --lora_alpha: $(cat "$WORK/consolidate.out")"
[[ ! -e $WORK/consolidated ]] || fail "the refused export left $WORK/consolidated"
"$DSCONSOLIDATE" "$WORK/ck_export" --format hf --hf_from "$WORK/tiny" --output "$WORK/consolidated" --dtype float32 \
  --lora_alpha 8 >"$WORK/consolidate.out" 2>&1 || fail "dsconsolidate --lora_alpha 8: $(cat "$WORK/consolidate.out")"
"$PY" "$HF/same_tensors.py" "$WORK/merged" "$WORK/consolidated" --label "LoRA checkpoint merged by dsconsolidate" ||
  fail "dsconsolidate's merge of the LoRA checkpoint differs from the job's export"
pass "dsconsolidate --format hf of a LoRA checkpoint: refused without --lora_alpha, with it the job's merged export"

# 3c. The same job split over a tensor group of 2 (sequence parallel): the
#     adapters split with their projections, so the losses, the adapter
#     folder (gathered whole), the merged export and dsconsolidate's join of
#     its checkpoint are the ZeRO-3 run's (another order of sums: 1e-4 of
#     the losses and of each tensor after 6 Adam steps at lr 1e-2).
run_job tp_export 2 --override train.steps=6 --override train.micro_batch_size=8 \
  --override ds_config.tensor_parallel.tp_size=2 --override model.sequence_parallel=true --override export.dtype=float32 \
  --override "export.adapter_dir=$WORK/adapter_tp" --override "export.hf_dir=$WORK/merged_tp" \
  --override "checkpoint.dir=$WORK/ck_tp" --override checkpoint.interval=6
same_losses export tp_export "LoRA: TP 2 (sequence parallel) vs ZeRO-3 on 2 ranks"
"$PY" "$HF/same_tensors.py" "$WORK/adapter" "$WORK/adapter_tp" --rtol 1e-4 --label "adapter folder at TP 2" ||
  fail "the adapter trained at TP 2 differs from the ZeRO-3 run's"
"$PY" "$HF/same_tensors.py" "$WORK/merged" "$WORK/merged_tp" --rtol 1e-4 --label "merged export at TP 2" ||
  fail "the merged export at TP 2 differs from the ZeRO-3 run's"
"$DSCONSOLIDATE" "$WORK/ck_tp" --format hf --hf_from "$WORK/tiny" --output "$WORK/consolidated_tp" --dtype float32 \
  --lora_alpha 8 >"$WORK/consolidate_tp.out" 2>&1 || fail "dsconsolidate of the TP 2 checkpoint: $(cat "$WORK/consolidate_tp.out")"
"$PY" "$HF/same_tensors.py" "$WORK/merged_tp" "$WORK/consolidated_tp" --label "TP 2 LoRA checkpoint merged by dsconsolidate" ||
  fail "dsconsolidate's merge of the TP 2 LoRA checkpoint differs from the job's export"
pass "LoRA at TP 2 (sequence parallel): the ZeRO-3 run's losses, adapters and merged export; dsconsolidate joins its checkpoint"

# 3d. The same job cut into 2 pipeline stages (ZeRO-1, 2 micro-batches of
#     4): each stage trains its layers' adapters on its part of the frozen
#     base, and the adapter folder and the merged export, gathered from both
#     stages, are the ZeRO-3 run's.
run_job pp_export 2 --override train.steps=6 --override train.micro_batch_size=4 \
  --override ds_config.pipeline.stages=2 --override ds_config.zero_optimization.stage=1 --override export.dtype=float32 \
  --override "export.adapter_dir=$WORK/adapter_pp" --override "export.hf_dir=$WORK/merged_pp"
same_losses export pp_export "LoRA: 2 pipeline stages vs ZeRO-3 on 2 ranks"
"$PY" "$HF/same_tensors.py" "$WORK/adapter" "$WORK/adapter_pp" --rtol 1e-4 --label "adapter folder from 2 stages" ||
  fail "the adapter trained over 2 pipeline stages differs from the ZeRO-3 run's"
"$PY" "$HF/same_tensors.py" "$WORK/merged" "$WORK/merged_pp" --rtol 1e-4 --label "merged export from 2 stages" ||
  fail "the merged export from 2 pipeline stages differs from the ZeRO-3 run's"
pass "LoRA over 2 pipeline stages: the ZeRO-3 run's losses, adapter folder and merged export"

# 4. The adapter folder read back (Note [PEFT adapter folders in]): dsgen on
#    the base with --adapter, unmerged, gives the reference's logits of base
#    + adapter; a setting it does not compute is refused by name.
"$DSGEN" --model "$WORK/tiny" --adapter "$WORK/adapter" --prompt_ids 1,20,300,41,5 --max_new_tokens 0 \
  --dump_logits "$WORK/adapted.logits" >"$WORK/dsgen-adapter.out" 2>&1 ||
  fail "dsgen --adapter: $(cat "$WORK/dsgen-adapter.out")"
"$PY" "$HF/llama_reference.py" logits "$WORK/tiny" 1,20,300,41,5 --adapter "$WORK/adapter" --compare "$WORK/adapted.logits" \
  --atol 2e-5 --rtol 2e-5 >"$WORK/reference-adapter.out" 2>&1 ||
  fail "the reference (base + adapter) disagrees with dsgen --adapter: $(cat "$WORK/reference-adapter.out")"
mkdir -p "$WORK/dora"
cp "$WORK/adapter/adapter_model.safetensors" "$WORK/dora/"
sed 's/"use_dora": false/"use_dora": true/' "$WORK/adapter/adapter_config.json" >"$WORK/dora/adapter_config.json"
if "$DSGEN" --model "$WORK/tiny" --adapter "$WORK/dora" --prompt_ids 1,2 --max_new_tokens 1 >"$WORK/dora.out" 2>&1; then
  fail "dsgen took a DoRA adapter"
fi
grep -q "adapter_config.json: use_dora is set; DoRA is not supported" "$WORK/dora.out" ||
  fail "a DoRA adapter was refused without naming use_dora: $(cat "$WORK/dora.out")"
pass "dsgen --adapter (base + PEFT adapter, unmerged) = the reference's base + adapter; use_dora refused by name"

# 4b. The adapter on a model split over 2 ranks (each rank's part of lora_B
#     for q/k/v, of lora_A for o, computed unmerged): one rank's tokens.
ADAPTED=(--model "$WORK/tiny" --adapter "$WORK/adapter" --prompt_ids 1,20,300,41,5 --max_new_tokens 12 --print_logprobs)
"$DSGEN" "${ADAPTED[@]}" >"$WORK/adapter-one.out" 2>&1 || fail "dsgen --adapter: $(cat "$WORK/adapter-one.out")"
"$DSLAUNCH" --num_gpus 2 --no_prefix "$DSGEN" "${ADAPTED[@]}" >"$WORK/adapter-two.out" 2>"$WORK/adapter-two.err" ||
  fail "dsgen --adapter on 2 ranks: $(tail -3 "$WORK/adapter-two.err")"
awk 'NR == FNR { id[FNR] = $1; lp[FNR] = $2; n = FNR; next }
  { if ($1 != id[FNR]) bad = 1; d = $2 - lp[FNR]; if (d < 0) d = -d; if (d > 1e-5) bad = 1; m = FNR }
  END { exit bad || m != n || n == 0 }' "$WORK/adapter-one.out" "$WORK/adapter-two.out" ||
  fail "dsgen --adapter on 2 ranks and on one differ: $(paste "$WORK/adapter-one.out" "$WORK/adapter-two.out" | head -3)"
pass "dsgen --adapter split over 2 ranks gives one rank's tokens and log-probabilities"

# 4. Stop after step 3, resume to 6 (ZeRO-2, 2 ranks): bit-identical losses.
Z2=(--override train.steps=6 --override train.micro_batch_size=4 --override ds_config.zero_optimization.stage=2
  --override checkpoint.interval=3)
run_job straight 2 "${Z2[@]}" --override "checkpoint.dir=$WORK/ck_straight"
set +e
"$DSLAUNCH" --num_gpus 2 "${COMMON[@]}" "${Z2[@]}" --override "checkpoint.dir=$WORK/ck_resume" "$CONFIG" \
  --loss_log "$WORK/resumed.tsv" --exit_at_step 3 >"$WORK/first.out" 2>&1
code=$?
set -e
((code == 1)) || fail "the first half should stop with 1 after step 3, got $code"
run_job second 2 "${Z2[@]}" --override "checkpoint.dir=$WORK/ck_resume"
cat "$WORK/second.tsv" >>"$WORK/resumed.tsv"
cmp "$WORK/straight.tsv" "$WORK/resumed.tsv" || fail "resumed losses differ: $(diff "$WORK/straight.tsv" "$WORK/resumed.tsv" | head -4)"
pass "LoRA: stop at 3, resume to 6 at ZeRO-2: every loss bit-identical"

# 5. A target that matches nothing: refused by name, no step.
set +e
"$DSLAUNCH" --num_gpus 1 "${COMMON[@]}" --override 'lora.target_modules=[q_proj, qkv_proj]' --override train.steps=6 \
  "$CONFIG" --loss_log "$WORK/bad.tsv" >"$WORK/bad.out" 2>&1
code=$?
set -e
((code != 0)) || fail "an unknown LoRA target trained"
grep -q "lora.target_modules: 'qkv_proj' matches no projection of this model" "$WORK/bad.out" ||
  fail "the error does not name the target: $(grep -m2 -i error "$WORK/bad.out")"
[[ ! -s $WORK/bad.tsv ]] || fail "steps ran with a bad LoRA target"
pass "a LoRA target that matches no projection is refused by name; nothing runs"
