#!/usr/bin/env bash
# Tensor-parallel generation (issue 20, Note [Tensor-parallel generation]):
# `dslaunch --num_gpus N dsgen ...` splits the model over the N ranks (Gloo
# on this CPU) and generates the tokens one rank generates, greedy and
# sampled with a seed, with log-probabilities within 1e-5: GQA with llama3
# rope scaling (2 and 4 ranks), q/k/v biases, tied embeddings, and a
# vocabulary the ranks' slices pad; with int8 weights (biases, 2 ranks), the
# tokens of the whole int8 model. Key/value heads that do not divide among
# the ranks are refused, naming the folder.
source "$(dirname "$0")/lib.sh"
: "${DSGEN:?DSGEN must point at the dsgen binary}"
HF=$(cd "$(dirname "$0")/../hf" && pwd)
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" -c 'import torch' 2>/dev/null || fail "$PY has no torch (scripts/setup.sh installs python3-torch)"

same_generation() {  # LABEL FILE_ONE FILE_SPLIT
  awk -v label="$1" 'NR == FNR { id[FNR] = $1; lp[FNR] = $2; n = FNR; next }
    { if ($1 != id[FNR]) { printf "%s: token %d is %s, one rank gave %s\n", label, FNR, $1, id[FNR]; bad = 1 }
      d = $2 - lp[FNR]; if (d < 0) d = -d; if (d > worst) worst = d; m = FNR }
    END { if (m != n || n == 0) { printf "%s: %d tokens, one rank gave %d\n", label, m, n; bad = 1 }
          if (worst > 1e-5) { printf "%s: log-probabilities differ by %g\n", label, worst; bad = 1 }
          if (!bad) printf "%s: %d tokens equal, log-probabilities within %.1e\n", label, n, worst; exit bad }' "$2" "$3"
}

for variant in llama3_gqa qwen2_bias mistral_tied; do
  "$PY" "$HF/make_tiny_llama.py" "$WORK/$variant" "$variant" --seed 7 >/dev/null
  modes=(greedy sampled)
  [[ $variant == qwen2_bias ]] && modes+=(int8)
  for mode in "${modes[@]}"; do
    sampling=()
    [[ $mode == sampled ]] && sampling=(--temperature 0.8 --top_k 50 --seed 11)
    [[ $mode == int8 ]] && sampling=(--int8)
    args=(--model "$WORK/$variant" --prompt_ids 1,20,300,41,5,77 --max_new_tokens 16 --print_logprobs "${sampling[@]}")
    "$DSGEN" "${args[@]}" >"$WORK/$variant-$mode-1.out" 2>&1 || fail "dsgen: $(cat "$WORK/$variant-$mode-1.out")"
    ranks=(2)
    [[ $variant == llama3_gqa ]] && ranks=(2 4)
    for n in "${ranks[@]}"; do
      "$DSLAUNCH" --num_gpus "$n" --no_prefix "$DSGEN" "${args[@]}" >"$WORK/$variant-$mode-$n.out" 2>"$WORK/$variant-$mode-$n.err" ||
        fail "dsgen on $n ranks exited $?: $(tail -3 "$WORK/$variant-$mode-$n.err")"
      same_generation "$variant $mode, $n ranks" "$WORK/$variant-$mode-1.out" "$WORK/$variant-$mode-$n.out" ||
        fail "$variant $mode: $n ranks and one rank differ"
    done
  done
done
pass "dsgen split over 2 and 4 ranks generates what one rank does (greedy and sampled; GQA, biases, tied embeddings)"

# mistral_tied has 2 key/value heads: not 4 ranks' worth.
if "$DSLAUNCH" --num_gpus 4 --no_prefix "$DSGEN" --model "$WORK/mistral_tied" --prompt_ids 1,2 >"$WORK/refused.out" 2>&1; then
  fail "dsgen split 2 key/value heads over 4 ranks"
fi
grep -q "key/value heads do not divide among 4 tensor-parallel ranks" "$WORK/refused.out" ||
  fail "not refused by name: $(tail -3 "$WORK/refused.out")"
pass "2 key/value heads over 4 ranks: refused, naming the folder"
