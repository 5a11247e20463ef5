#!/usr/bin/env bash
# ZeRO-Inference (issue 20, Note [Streamed layer weights]): dsgen with
# --offload_params cpu, whose decoder layers stream from host memory through
# two device slots, and with --offload_params nvme, whose layers are read
# from files (Note [Pieces on NVMe]), continues a prompt exactly as
# dsgen with the whole model
# on the device: the same greedy tokens, log-probabilities within 1e-4 (the
# whole model joins q/k/v into one product, the streamed one does not), on
# the tiny folders of tests/hf/ (grouped-query attention with biases, a tied
# head), with int8 weights too. On this machine the device is the CPU: the
# placement and the order of the copies are what is checked here; the GPU
# figures come from scripts/gpu-generation-bench.sh (OFFLOAD=1). The layer
# files go when dsgen ends; --nvme_path and --offload_params nvme need each
# other.
source "$(dirname "$0")/lib.sh"
: "${DSGEN:?DSGEN must point at the dsgen binary}"
HF=$(cd "$(dirname "$0")/../hf" && pwd)
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" -c 'import torch' 2>/dev/null || fail "$PY has no torch (scripts/setup.sh installs python3-torch)"
ids=$(seq 3 7 80 | paste -sd, -)
mkdir -p "$WORK/drive"  # the "drive" of --offload_params nvme (a real file system: not tmpfs)
for variant in qwen2_bias mistral_tied; do
  "$PY" "$HF/make_tiny_llama.py" "$WORK/$variant" "$variant" --seed 9 >/dev/null
  for weights in float int8; do
    flags=()
    [[ $weights == int8 ]] && flags=(--int8)
    for placement in whole streamed nvme; do
      extra=()
      [[ $placement == streamed ]] && extra=(--offload_params cpu)
      [[ $placement == nvme ]] && extra=(--offload_params nvme --nvme_path "$WORK/drive")
      out="$WORK/$variant-$weights-$placement.out"
      "$DSGEN" --model "$WORK/$variant" --prompt_ids "$ids" --max_new_tokens 12 --print_logprobs \
        "${flags[@]}" "${extra[@]}" >"$out" 2>"$out.err" || fail "dsgen $weights $placement on $variant: $(cat "$out" "$out.err")"
    done
    grep -q "ZeRO-Inference: .* decoder layers' weights in host memory" "$WORK/$variant-$weights-streamed.out.err" ||
      fail "dsgen --offload_params cpu did not say where the weights are: $(cat "$WORK/$variant-$weights-streamed.out.err")"
    grep -q "ZeRO-Inference: .* decoder layers' weights on NVMe: .* files under $WORK/drive/dslaunch-swap/inference-layers-" \
      "$WORK/$variant-$weights-nvme.out.err" ||
      fail "dsgen --offload_params nvme did not say where the weights are: $(cat "$WORK/$variant-$weights-nvme.out.err")"
    left=$(ls -A "$WORK/drive/dslaunch-swap" 2>&1) || fail "dsgen --offload_params nvme made no layer files: $left"
    [[ -z $left ]] || fail "dsgen left its layer files behind: $left"
    for placement in streamed nvme; do
    "$PY" - "$WORK/$variant-$weights-whole.out" "$WORK/$variant-$weights-$placement.out" <<'PYTHON' ||
import sys
def read(path):
    rows = [line.split() for line in open(path) if line.strip()]
    return [int(r[0]) for r in rows], [float(r[1]) for r in rows]
tokens_a, logprobs_a = read(sys.argv[1])
tokens_b, logprobs_b = read(sys.argv[2])
if not tokens_a or tokens_a != tokens_b:
    sys.exit("tokens differ: whole %s, streamed %s" % (tokens_a, tokens_b))
worst = max(abs(a - b) for a, b in zip(logprobs_a, logprobs_b))
if worst > 1e-4:
    sys.exit("log-probabilities differ by %g" % worst)
PYTHON
      fail "$variant ($weights, $placement): the streamed model's continuation is not the whole model's"
    done
  done
done
# The flags that need each other, refused before any work.
if "$DSGEN" --model "$WORK/qwen2_bias" --prompt_ids 3 --offload_params nvme >"$WORK/flags.out" 2>&1; then
  fail "dsgen --offload_params nvme without --nvme_path ran"
fi
grep -q -- "--offload_params nvme needs --nvme_path" "$WORK/flags.out" || fail "no reason given: $(cat "$WORK/flags.out")"
if "$DSGEN" --model "$WORK/qwen2_bias" --prompt_ids 3 --offload_params cpu --nvme_path "$WORK/drive" >"$WORK/flags.out" 2>&1; then
  fail "dsgen --nvme_path with --offload_params cpu ran"
fi
grep -q -- "--nvme_path goes with --offload_params nvme" "$WORK/flags.out" || fail "no reason given: $(cat "$WORK/flags.out")"
pass "dsgen --offload_params cpu and nvme continue prompts as the whole model does (2 folders, float and int8)"
