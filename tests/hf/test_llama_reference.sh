#!/usr/bin/env bash
# dslaunch's Llama family against an independent PyTorch implementation of
# Hugging Face's Llama (llama_reference.py, Debian's python3-torch): tiny
# model folders written by make_tiny_llama.py in every variant the loader
# accepts (GQA + llama3 rope scaling + untied head; tied Mistral; Qwen2 biases
# with rope_parameters/linear; dynamic NTK past the trained context; plain
# Llama-2; Mixtral's experts), single-file and sharded, F32/BF16/F16 on disk; dsgen dumps the
# prompt's logits and the reference checks every one of them; a fine-tune
# step's loss and gradients (dsgen --dump_gradients) against its autograd.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${DSGEN:?DSGEN names the dsgen binary}"
python=${REFERENCE_PYTHON:-/usr/bin/python3}
"$python" -c 'import torch' 2>/dev/null || { echo "FAIL: $python has no torch (scripts/setup.sh installs python3-torch)"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/dshf-ref.XXXXXX")
trap 'rm -rf "$work"' EXIT

# 12 prompt tokens: past llama2_dynamic's max_position_embeddings (8), so its
# dynamic scaling is in play.
ids=1,5,9,33,200,17,3,99,100,101,7,383
failures=0
# The reference's checks queue up in $work/checks and run in one Python
# process at the end (importing torch costs each process ~2 s of CPU):
# each line is the report file and llama_reference.py's arguments.
checks=()  # NAME:REPORT, in order
queue_check() {  # NAME REPORT ARGS...
  checks+=("$1:$2")
  printf '%q ' "${@:2}" >>"$work/checks"
  echo >>"$work/checks"
}

# The model folders, in one Python process too: NAME VARIANT DTYPE SHARDS.
folders=("llama3_gqa llama3_gqa float32 2" "mistral_tied mistral_tied float32 1"
  "qwen2_bias qwen2_bias float32 3" "llama2_dynamic llama2_dynamic float32 1"
  "llama2_bf16 llama2 bfloat16 2" "llama2_fp16 llama2 float16 1" "mixtral mixtral float32 2")
for folder in "${folders[@]}"; do
  read -r name variant dtype shards <<<"$folder"
  printf '%q ' "$work/$name" "$variant" --dtype "$dtype" --shards "$shards" --seed 7
  echo
done >"$work/folders"
"$python" "$here/make_tiny_llama.py" --batch "$work/folders"

logits() {  # NAME: the prompt's logits
  local name=$1
  if ! "$DSGEN" --model "$work/$name" --prompt_ids "$ids" --max_new_tokens 0 --dump_logits "$work/$name.logits" \
      >"$work/$name.out" 2>&1; then
    echo "FAIL: $name: dsgen failed:"; cat "$work/$name.out"; failures=$((failures + 1)); return
  fi
  queue_check "$name" "$work/$name.cmp" logits "$work/$name" "$ids" --compare "$work/$name.logits" --atol 2e-5 --rtol 2e-5
}
for folder in "${folders[@]}"; do logits "${folder%% *}"; done

# A fine-tune step: the loss the trainer computes (ModelInterface::BatchLoss)
# and every weight's gradient against the reference's autograd, with an
# instruction-style masked prompt and with recomputed (checkpointed) layers.
gradients() {  # NAME FOLDER [dsgen flags...]
  local name=$1 folder=$2
  shift 2
  local prefix=0
  for ((i = 1; i <= $#; i++)); do [[ ${!i} == --masked_prefix ]] && { j=$((i + 1)); prefix=${!j}; }; done
  if ! "$DSGEN" --model "$work/$folder" --prompt_ids "$ids" --max_new_tokens 0 --dump_gradients "$work/$name.grads" "$@" \
      >"$work/$name.gout" 2>&1; then
    echo "FAIL: $name: dsgen --dump_gradients failed:"; cat "$work/$name.gout"; failures=$((failures + 1)); return
  fi
  queue_check "$name" "$work/$name.gcmp" gradients "$work/$folder" "$ids" --compare "$work/$name.grads" \
    --masked_prefix "$prefix" --rtol 1e-4
}
gradients grad_llama3_gqa llama3_gqa
gradients grad_mistral_tied mistral_tied --masked_prefix 5
gradients grad_qwen2_bias qwen2_bias --checkpointed_layers 2
gradients grad_llama2_dynamic llama2_dynamic --masked_prefix 3 --checkpointed_layers 1
gradients grad_mixtral mixtral --masked_prefix 2 --checkpointed_layers 2

# A check whose report or status is missing (the process died) fails below.
[[ ! -f $work/checks ]] || "$python" "$here/llama_reference.py" --batch "$work/checks" || true
for check in "${checks[@]}"; do
  name=${check%%:*} report=${check#*:}
  if [[ $(cat "$report.rc" 2>/dev/null) == 0 ]]; then
    echo "PASS: $name: $(grep -m1 -E 'worst|^loss' "$report")"
  else
    echo "FAIL: $name:"; cat "$report"; failures=$((failures + 1))
  fi
done

# Generation: greedy continues with the reference's argmax, token by token.
"$DSGEN" --model "$work/llama3_gqa" --prompt_ids 1,5,9 --max_new_tokens 4 >"$work/gen.out"
read -r -a generated <"$work/gen.out"
"$python" - "$work/llama3_gqa" "${generated[@]}" <<PYEOF || { echo "FAIL: greedy generation differs from the reference's argmax"; failures=$((failures + 1)); }
import json, sys
sys.path.insert(0, "$here")
import llama_reference, safetensors_io
folder, got = sys.argv[1], [int(t) for t in sys.argv[2:]]
config = json.load(open(folder + "/config.json"))
weights = {k: v.float() for k, v in safetensors_io.read_folder(folder).items()}
ids = [1, 5, 9]
for _ in range(4):
    ids.append(int(llama_reference.forward(config, weights, ids)[-1].argmax()))
print("greedy: dsgen", got, "reference", ids[3:])
sys.exit(0 if got == ids[3:] else 1)
PYEOF

if ((failures > 0)); then
  echo "FAIL: $failures check(s) failed"
  exit 1
fi
echo "PASS: every variant's logits, loss and gradients match the reference"
