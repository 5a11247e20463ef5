# Sourced by test_llama_instruct*.sh after lib.sh: the tiny Alpaca records,
# their SentencePiece tokenizer and a random tiny Llama folder
# (tests/hf/make_tiny_instruct.py), checked against spm_encode, and the
# overrides every run of configs/llama-finetune-tiny.cfg takes (COMMON).
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
