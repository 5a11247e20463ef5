#!/usr/bin/env bash
# dstokenize against independent tokenizers on the same strings
# (make_test_strings.mjs: ~1,650 strings of every script, emoji with ZWJ
# sequences, whitespace runs, digit runs, contractions, code, special tokens,
# the empty string):
#   - llama3-tokenizer-js and llama-tokenizer-js: the real Llama 3 and
#     Llama 2 vocabularies and merges with their own encoders;
#   - @huggingface/tokenizers: a JavaScript implementation of tokenizer.json,
#     run on the tokenizer.json files make_reference_folders.mjs writes from
#     those vocabularies (Llama 3 with a Split regex and with GPT-2's
#     ByteLevel regex; Llama 2 with the Prepend/Replace normalizer and with
#     the Metaspace pre-tokenizer);
#   - Debian's spm_encode on the generated Llama 2 tokenizer.model (which
#     dstokenize reads with our own reader, not libsentencepiece).
# Every id of every string must agree. The npm packages come from
# scripts/setup.sh (scripts/setup-tokenizer-reference.sh); without them the
# test fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${DSTOKENIZE:?DSTOKENIZE names the dstokenize binary}"
for tool in node spm_encode; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing (scripts/setup.sh installs it)"; exit 1; }
done
if [[ ! -f $here/node_modules/.dslaunch-lock-sha256 ]]; then
  echo "FAIL: the npm reference tokenizers are not installed in $here/node_modules (run scripts/setup.sh)"
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/dstok-ref.XXXXXX")
trap 'rm -rf "$work"' EXIT

node "$here/make_reference_folders.mjs" "$work"
node "$here/make_test_strings.mjs" >"$work/strings.jsonl"
# The strings spm_encode can take (it reads lines), as text and as JSON lines.
node -e '
  const fs = require("fs");
  const all = fs.readFileSync(process.argv[1], "utf8").replace(/\n$/, "").split("\n").map((l) => JSON.parse(l));
  const lines = all.filter((s) => !/[\r\n]/.test(s));
  fs.writeFileSync(process.argv[2], lines.join("\n") + "\n");
  fs.writeFileSync(process.argv[3], lines.map((s) => JSON.stringify(s)).join("\n") + "\n");
' "$work/strings.jsonl" "$work/lines.txt" "$work/lines.jsonl"

# The JavaScript encoders, two at a time (each loads a vocabulary for a second or two).
encode() {  # ENCODER FOLDER
  node "$here/encode_reference.mjs" "$1" "$work/$2" "$work/strings.jsonl" >"$work/$1.$2.expected"
}
encode llama3js llama3 & encode hfjs llama3 & wait
encode hfjs llama3_gpt2 & encode llama2js llama2 & wait
encode hfjs llama2 & encode hfjs llama2_metaspace & wait
spm_encode --model="$work/llama2/tokenizer.model" --output_format=id <"$work/lines.txt" >"$work/spm.expected"

ds() {  # NAME INPUT dstokenize-flags...
  local name=$1 input=$2
  shift 2
  "$DSTOKENIZE" --no_bos --no_eos "$@" <"$input" >"$work/$name.actual"
}
ds llama3 "$work/strings.jsonl" --json_lines --tokenizer "$work/llama3"
ds llama3_gpt2 "$work/strings.jsonl" --json_lines --tokenizer "$work/llama3_gpt2/tokenizer.json"
ds llama2 "$work/strings.jsonl" --json_lines --tokenizer "$work/llama2/tokenizer.json"
ds llama2_plain "$work/strings.jsonl" --json_lines --plain_text --tokenizer "$work/llama2/tokenizer.json"
ds llama2_metaspace "$work/strings.jsonl" --json_lines --tokenizer "$work/llama2_metaspace"
# tokenizer.model through our own reader (runtime/tokenizer/sentencepiece_model.h):
# "<s>" in text is special, as Hugging Face reads it; SentencePiece and
# llama-tokenizer-js read it as text (--plain_text).
ds llama2_sp "$work/strings.jsonl" --json_lines --tokenizer "$work/llama2/tokenizer.model"
ds llama2_sp_plain "$work/strings.jsonl" --json_lines --plain_text --tokenizer "$work/llama2/tokenizer.model"
ds llama2_sp_lines "$work/lines.txt" --plain_text --tokenizer "$work/llama2/tokenizer.model"

failures=0
compare() {  # LABEL EXPECTED ACTUAL STRINGS
  node "$here/compare_ids.mjs" "$@" || failures=$((failures + 1))
}
s=$work/strings.jsonl
compare "Llama 3 tokenizer.json (Split + ByteLevel) vs llama3-tokenizer-js" "$work/llama3js.llama3.expected" "$work/llama3.actual" "$s"
compare "Llama 3 tokenizer.json (Split + ByteLevel) vs @huggingface/tokenizers" "$work/hfjs.llama3.expected" "$work/llama3.actual" "$s"
compare "Llama 3 vocabulary, GPT-2 ByteLevel regex vs @huggingface/tokenizers" "$work/hfjs.llama3_gpt2.expected" "$work/llama3_gpt2.actual" "$s"
compare "Llama 2 tokenizer.json vs @huggingface/tokenizers" "$work/hfjs.llama2.expected" "$work/llama2.actual" "$s"
# llama-tokenizer-js has no special tokens: "<s>" in the text is text.
compare "Llama 2 tokenizer.json --plain_text vs llama-tokenizer-js" "$work/llama2js.llama2.expected" "$work/llama2_plain.actual" "$s"
compare "Llama 2 tokenizer.json (Metaspace) vs @huggingface/tokenizers" "$work/hfjs.llama2_metaspace.expected" "$work/llama2_metaspace.actual" "$s"
compare "Llama 2 tokenizer.model --plain_text vs llama-tokenizer-js" "$work/llama2js.llama2.expected" "$work/llama2_sp_plain.actual" "$s"
compare "Llama 2 tokenizer.model vs @huggingface/tokenizers on its tokenizer.json" "$work/hfjs.llama2.expected" "$work/llama2_sp.actual" "$s"
compare "Llama 2 tokenizer.model --plain_text vs spm_encode" "$work/spm.expected" "$work/llama2_sp_lines.actual" "$work/lines.jsonl"

# Defaults: each folder's own bos convention (llama3-tokenizer-js and
# llama-tokenizer-js start "I" with 128000 and 1), and special tokens.
expect() {  # LABEL EXPECTED dstokenize-args... (stdin: "I")
  local label=$1 expected=$2 got
  shift 2
  got=$(printf 'I\n' | "$DSTOKENIZE" "$@")
  if [[ $got == "$expected" ]]; then echo "PASS: $label: $got"; else
    echo "FAIL: $label: expected '$expected', got '$got'"; failures=$((failures + 1)); fi
}
expect "Llama 3 folder adds bos" "128000 40" --tokenizer "$work/llama3"
expect "Llama 2 folder adds bos" "1 306" --tokenizer "$work/llama2"
expect "Llama 2 tokenizer.model adds bos" "1 306" --tokenizer "$work/llama2/tokenizer.model"
expect "--no_bos" "40" --tokenizer "$work/llama3" --no_bos
expect "--add_eos" "128000 40 128001" --tokenizer "$work/llama3" --add_eos

if ((failures > 0)); then
  echo "FAIL: $failures check(s) failed"
  exit 1
fi
echo "PASS: every check agrees"
