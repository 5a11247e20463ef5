#!/usr/bin/env bash
# Weight-only int8 (issue 20, Note [Int8 weights]): its accuracy cost on the
# tiny Hugging Face folders of tests/hf/, measured the way a user would,
# with dsgen's logits of a 48-token prompt with and without --int8: the
# largest logit difference relative to the largest |logit|, and how often
# the most probable token is the same. The figures are printed; a cost
# beyond 10% of the logits' range or below 80% top-1 agreement fails.
source "$(dirname "$0")/lib.sh"
: "${DSGEN:?DSGEN must point at the dsgen binary}"
HF=$(cd "$(dirname "$0")/../hf" && pwd)
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" -c 'import torch' 2>/dev/null || fail "$PY has no torch (scripts/setup.sh installs python3-torch)"
ids=$(seq 3 7 336 | paste -sd, -)  # 48 ids below every variant's vocabulary
for variant in llama2 llama3_gqa qwen2_bias mistral_tied mixtral; do
  "$PY" "$HF/make_tiny_llama.py" "$WORK/$variant" "$variant" --seed 5 >/dev/null
  for mode in float int8; do
    flags=()
    [[ $mode == int8 ]] && flags=(--int8)
    mkdir -p "$WORK/$variant-$mode"
    "$DSGEN" --model "$WORK/$variant" --prompt_ids "$ids" --max_new_tokens 0 "${flags[@]}" \
      --dump_logits "$WORK/$variant-$mode/model.safetensors" >"$WORK/$variant-$mode.out" 2>&1 ||
      fail "dsgen $mode on $variant: $(cat "$WORK/$variant-$mode.out")"
  done
  "$PY" - "$HF" "$WORK/$variant-float/model.safetensors" "$WORK/$variant-int8/model.safetensors" "$variant" <<'PYTHON' ||
import sys
sys.path.insert(0, sys.argv[1])
import safetensors_io
a = safetensors_io.read(sys.argv[2])["logits"].float()
b = safetensors_io.read(sys.argv[3])["logits"].float()
relative = ((b - a).abs().max() / a.abs().max()).item()
agreement = (a.argmax(1) == b.argmax(1)).float().mean().item()
print("int8 on %s: max |logit difference| %.2f%% of the largest |logit|, top-1 agreement %.1f%% over %d positions"
      % (sys.argv[4], 100 * relative, 100 * agreement, a.shape[0]))
sys.exit(0 if 0 < relative < 0.1 and agreement >= 0.8 else 1)
PYTHON
    fail "int8 on $variant costs more than stated (or nothing was quantized)"
done
pass "int8 weights on the tiny folders: within 10% of the logits' range, top-1 agreement at least 80%"
