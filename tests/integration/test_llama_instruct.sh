#!/usr/bin/env bash
# The seeds' example at CPU size (issue 15): configs/llama-finetune-tiny.cfg
# fine-tunes a tiny Llama folder on Alpaca records with its own SentencePiece
# tokenizer, LoRA on q/k/v/o and ZeRO-2 (ds_zero2_config.json, "auto" values):
#  - 2 ranks: the held-out loss falls; the PEFT adapter and the merged model
#    are written;
#  - packed records: 1 rank at ZeRO-0 and 2 ranks at ZeRO-3 give the same
#    losses, and stop/resume is bit for bit;
#  - a full fine-tune (lora.r 0) on the same records: 1 rank = 2 ranks at ZeRO-1;
#  - a malformed record is refused naming the file and line; nothing runs.
source "$(dirname "$0")/lib.sh"
HF=$(cd "$(dirname "$0")/../hf" && pwd)
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/llama-finetune-tiny.cfg
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" -c 'import torch' 2>/dev/null || fail "$PY has no torch (scripts/setup.sh installs python3-torch)"
command -v spm_train >/dev/null || fail "no spm_train (scripts/setup.sh installs sentencepiece)"
: "${DSTOKENIZE:?DSTOKENIZE must point at the dstokenize binary}"
"$PY" "$HF/make_tiny_instruct.py" "$WORK/ti" >/dev/null
# The folder's tokenizer.json (converted from the SentencePiece model) gives
# spm_encode's ids on every field of every record.
"$PY" -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print("\n".join(v for v in (r["instruction"], r["input"], r["output"]) if v))' "$WORK/ti/alpaca.jsonl" >"$WORK/fields.txt"
"$DSTOKENIZE" --tokenizer "$WORK/ti/model" --no_bos <"$WORK/fields.txt" >"$WORK/fields.ours" || fail "dstokenize failed"
spm_encode --model "$WORK/ti/sp.model" --output_format=id <"$WORK/fields.txt" >"$WORK/fields.spm"
cmp -s "$WORK/fields.ours" "$WORK/fields.spm" ||
  fail "the tiny folder's tokenizer.json disagrees with spm_encode: $(diff "$WORK/fields.ours" "$WORK/fields.spm" | head -3)"
COMMON=(--override "model.from=$WORK/ti/model" --override "data.records=[$WORK/ti/alpaca.jsonl]"
  --override "data.prepared=$WORK/ti/prepared" --override 'checkpoint.dir=""' --override 'export.hf_dir=""'
  --override 'export.adapter_dir=""')

run() {  # NAME WORLD [dslaunch arguments...]
  local name=$1 world=$2
  shift 2
  "$DSLAUNCH" --num_gpus "$world" "${COMMON[@]}" "$@" "$CONFIG" --loss_log "$WORK/$name.tsv" \
    >"$WORK/$name.out" 2>"$WORK/$name.err" || fail "$name exited $?: $(grep -m2 -i error "$WORK/$name.out" "$WORK/$name.err")"
}
same_losses() {  # A B LABEL
  paste "$WORK/$1.tsv" "$WORK/$2.tsv" | awk -v label="$3" '
    { d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r; if (r > 1e-4) bad = 1 }
    END { printf "%s: worst relative loss difference %.2e over %d steps\n", label, worst, NR; exit bad || NR == 0 }' ||
    fail "$3: losses differ"
}

# 1. The example as written (2 ranks, ZeRO-2, LoRA): the held-out loss falls.
run tiny 2 --override "export.adapter_dir=$WORK/adapter" --override "export.hf_dir=$WORK/merged"
grep -q "dsrank: training data: .* records in .* samples of 128" "$WORK/tiny.out" ||
  fail "no instruction data summary: $(grep -m3 dsrank "$WORK/tiny.out")"
grep -q "dsrank: LoRA r=8 alpha=16 on" "$WORK/tiny.out" || fail "LoRA is not on"
evals=$(sed -nE 's/.*eval step=([0-9]+) loss=([0-9.]+).*/\2/p' "$WORK/tiny.out" | tr '\n' ' ')
read -r -a e <<<"$evals"
((${#e[@]} == 3)) || fail "expected 3 evaluations, got: $evals"
awk -v a="${e[0]}" -v b="${e[2]}" 'BEGIN { exit !(b < a * 0.9) }' || fail "the held-out loss did not fall: $evals"
[[ -f $WORK/adapter/adapter_model.safetensors && -f $WORK/merged/config.json && -f $WORK/merged/tokenizer.json ]] ||
  fail "the adapter or the merged folder (with its tokenizer) is missing"
pass "Alpaca + LoRA + ZeRO-2 on 2 ranks: held-out loss $evals; adapter and merged model written"

# dsgen --prompt TEXT on the merged folder: its tokenizer (bos + SentencePiece,
# as spm_encode gives) and the same continuation as --prompt_ids.
: "${DSGEN:?DSGEN must point at the dsgen binary}"
prompt='Below is an instruction that describes a task. Write a response that appropriately completes the request.'
"$DSGEN" --model "$WORK/merged" --prompt "$prompt" --max_new_tokens 6 --print_ids >"$WORK/gen_text.out" 2>&1 ||
  fail "dsgen --prompt: $(cat "$WORK/gen_text.out")"
ids=$(printf '%s\n' "$prompt" | spm_encode --model "$WORK/ti/sp.model" --output_format=id | tr ' ' ',')
"$DSGEN" --model "$WORK/merged" --prompt_ids "1,$ids" --max_new_tokens 6 >"$WORK/gen_ids.out" 2>&1 ||
  fail "dsgen --prompt_ids: $(cat "$WORK/gen_ids.out")"
new_ids=$(head -1 "$WORK/gen_text.out")
[[ -n $new_ids && $(head -1 "$WORK/gen_ids.out") == "$new_ids"* ]] ||
  fail "dsgen --prompt and --prompt_ids (bos + spm_encode's ids) continue differently: '$new_ids' vs '$(head -1 "$WORK/gen_ids.out")'"
pass "dsgen --prompt: the folder's tokenizer gives spm_encode's ids (with bos); the continuation '$(sed -n 2p "$WORK/gen_text.out")'"
# The same folder with only a tokenizer.model (SentencePiece, read by our
# own reader inside dsgen, beside LibTorch): the same ids and text.
cp -r "$WORK/merged" "$WORK/merged_sp"
rm "$WORK/merged_sp/tokenizer.json"
cp "$WORK/ti/sp.model" "$WORK/merged_sp/tokenizer.model"
"$DSGEN" --model "$WORK/merged_sp" --prompt "$prompt" --max_new_tokens 6 --print_ids >"$WORK/gen_sp.out" 2>&1 ||
  fail "dsgen --prompt with tokenizer.model only: $(cat "$WORK/gen_sp.out")"
cmp -s "$WORK/gen_text.out" "$WORK/gen_sp.out" ||
  fail "tokenizer.model and tokenizer.json continue differently: $(cat "$WORK/gen_sp.out") vs $(cat "$WORK/gen_text.out")"
pass "a folder with only tokenizer.model: dsgen --prompt gives the same ids and text"

# 2. Packed records: 1 rank ZeRO-0 = 2 ranks ZeRO-3; stop at 3, resume to 6, bit for bit.
PACK=(--override data.packing=true --override train.steps=6 --override train.eval_interval=0 --override train.warmup_steps=2)
run pack0 1 "${PACK[@]}" --override ds_config.zero_optimization.stage=0
grep -q "packed" "$WORK/pack0.out" || fail "the samples are not packed: $(grep -m2 'training data' "$WORK/pack0.out")"
run pack3 2 "${PACK[@]}" --override ds_config.zero_optimization.stage=3 \
  --override ds_config.zero_optimization.stage3_param_persistence_threshold=0
same_losses pack0 pack3 "packed records: ZeRO-3 on 2 ranks vs ZeRO-0 on 1"
set +e
"$DSLAUNCH" --num_gpus 2 "${COMMON[@]}" "${PACK[@]}" --override "checkpoint.dir=$WORK/ck" --override checkpoint.interval=3 \
  "$CONFIG" --loss_log "$WORK/resumed.tsv" --exit_at_step 3 >"$WORK/first.out" 2>&1
code=$?
set -e
((code == 1)) || fail "the first half should stop with 1 after step 3, got $code"
run second 2 "${PACK[@]}" --override "checkpoint.dir=$WORK/ck" --override checkpoint.interval=3
run straight 2 "${PACK[@]}"
cat "$WORK/second.tsv" >>"$WORK/resumed.tsv"
cmp "$WORK/straight.tsv" "$WORK/resumed.tsv" || fail "resumed losses differ: $(diff "$WORK/straight.tsv" "$WORK/resumed.tsv" | head -4)"
pass "packed records: ZeRO-0 on 1 rank = ZeRO-3 on 2; stop at 3 and resume to 6 bit-identically (ZeRO-2)"

# 3. A full fine-tune on the same records: 1 rank = 2 ranks at ZeRO-1.
FULL=(--override lora.r=0 --override 'lora.target_modules=[]' --override train.steps=6 --override train.eval_interval=0
  --override train.warmup_steps=2 --override train.lr=1e-3)
run full0 1 "${FULL[@]}" --override ds_config.zero_optimization.stage=0
! grep -q "LoRA r=" "$WORK/full0.out" || fail "LoRA is on with lora.r 0"
run full1 2 "${FULL[@]}" --override ds_config.zero_optimization.stage=1
same_losses full0 full1 "full fine-tune on instruction data: ZeRO-1 on 2 ranks vs ZeRO-0 on 1"
pass "full fine-tune on the Alpaca records: ZeRO-0 on 1 rank = ZeRO-1 on 2"

# 4. A malformed record: refused naming the file and line, before any step.
cp "$WORK/ti/alpaca.jsonl" "$WORK/bad.jsonl"
sed -i '7s/.*/{"instruction": "Add the two numbers.", "input": "1 2"}/' "$WORK/bad.jsonl"
set +e
"$DSLAUNCH" --num_gpus 1 "${COMMON[@]}" --override "data.records=[$WORK/bad.jsonl]" --override "data.prepared=$WORK/bad" \
  --override train.steps=6 "$CONFIG" --loss_log "$WORK/bad.tsv" >"$WORK/bad.out" 2>&1
code=$?
set -e
((code != 0)) || fail "a malformed record trained"
grep -q "$WORK/bad.jsonl:7" "$WORK/bad.out" || fail "the error does not name the file and line: $(grep -m2 -i error "$WORK/bad.out")"
grep -q "output" "$WORK/bad.out" || fail "the error does not name the missing field"
[[ ! -s $WORK/bad.tsv ]] || fail "steps ran with a malformed record"
pass "a record without its output is refused naming $WORK/bad.jsonl:7; nothing runs"
