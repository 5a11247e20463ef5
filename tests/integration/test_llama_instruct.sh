#!/usr/bin/env bash
# The seeds' example at CPU size (issue 15): configs/llama-finetune-tiny.cfg
# fine-tunes a tiny Llama folder on Alpaca records with its own SentencePiece
# tokenizer, LoRA on q/k/v/o and ZeRO-2 (ds_zero2_config.json, "auto" values):
#  - 2 ranks: the held-out loss falls; the PEFT adapter and the merged model
#    are written; dsgen --prompt reads the folder's tokenizer (tokenizer.json
#    or tokenizer.model alone);
#  - a malformed record is refused naming the file and line; nothing runs.
# Packed records and a full fine-tune: test_llama_instruct_packed.sh.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_instruct_setup.sh"

# 1. The example as written (2 ranks, ZeRO-2, LoRA): the held-out loss falls.
run_job tiny 2 --override "export.adapter_dir=$WORK/adapter" --override "export.hf_dir=$WORK/merged"
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

# 2. A malformed record: refused naming the file and line, before any step.
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
