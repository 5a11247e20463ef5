#!/usr/bin/env bash
# LoRA on a Mixtral folder's experts (issue 15; runtime/model/mixtral_expert.h):
#  - adapters on q_proj, the router (gate, in fp32) and every expert's w1,
#    w2, w3: 4 ranks at expert
#    parallelism 2 (x DP 2) give the losses of EP 1 (x DP 4), and the loss
#    falls;
#  - the PEFT adapter folder and the merged export written at EP 2 (each
#    expert's adapters gathered from its rank) equal EP 1's; the independent
#    reference (tests/hf/llama_reference.py: Mixtral's routing token by
#    token, PEFT's unmerged LoRA) applied on the base gives dsgen's logits of
#    the merged export, and dsgen --adapter on the base gives them too;
#  - stopped after step 3 at EP 2 and resumed, the losses are bit for bit
#    the uninterrupted run's;
#  - all-linear adapts attention, the router and the experts, as PEFT's, and
#    the adapter_config.json names the projections adapted;
#  - at EP 2, LoRA on attention only (the experts frozen on their ranks)
#    takes EP 1's steps and its merged export gathers every expert; targets
#    that adapt one rank's experts and not another's are refused by every
#    rank before a step runs.
source "$(dirname "$0")/lib.sh"
: "${DSGEN:?DSGEN must point at the dsgen binary}"
HF=$(cd "$(dirname "$0")/../hf" && pwd)
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/llama-tiny.cfg
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" -c 'import torch' 2>/dev/null || fail "$PY has no torch (scripts/setup.sh installs python3-torch)"
"$PY" "$HF/make_tiny_llama.py" "$WORK/mixtral" mixtral --seed 3
read -r layers experts < <("$PY" -c 'import json, sys; c = json.load(open(sys.argv[1]))
print(c["num_hidden_layers"], c["num_local_experts"])' "$WORK/mixtral/config.json")
COMMON=(--override "model.from=$WORK/mixtral" --override "data.prepared=$WORK/data/fortunes"
  --override train.eval_interval=0 --override 'checkpoint.dir=""' --override 'export.hf_dir=""'
  --override train.global_batch_size=8 --override train.steps=6 --override train.micro_batch_size=2
  --override train.lr=1e-2 --override ds_config.zero_optimization.stage=2
  --override lora.r=4 --override lora.lora_alpha=8 --override 'lora.target_modules=[q_proj, gate, w1, w2, w3]')
EP2=(--override ds_config.moe_expert_parallel_size=2)

# 1. EP 2 x DP 2 takes EP 1 x DP 4's steps; both export.
for ep in 1 2; do
  extra=()
  ((ep == 2)) && extra=("${EP2[@]}")
  run_job ep$ep 4 "${extra[@]}" --override export.dtype=float32 --override "export.hf_dir=$WORK/merged$ep" \
    --override "export.adapter_dir=$WORK/adapter$ep"
done
projections=$(sed -nE 's/.*dsrank: LoRA r=4 alpha=8 on ([0-9]+) projections.*/\1/p' "$WORK/ep1.out")
[[ $projections == $((layers * (2 + 3 * experts))) ]] ||
  fail "LoRA on '$projections' projections, expected q_proj, the router and 3 per expert over $layers layers of $experts experts"
same_losses ep1 ep2 "LoRA on the experts: EP 2 x DP 2 vs EP 1 x DP 4"
awk 'NR <= 2 { first += $2 } { last2[NR % 2] = $2 } END { exit !((last2[0] + last2[1]) < first) }' "$WORK/ep1.tsv" ||
  fail "the loss did not fall over 6 steps with LoRA on the experts"
pass "LoRA on q_proj, the router and every expert's w1/w2/w3 ($projections projections): EP 2 takes EP 1's steps; the loss falls"

# 2. The exports: EP 2's (gathered) are EP 1's; the adapter holds every
#    expert's factors; base + adapter in the reference = the merged export.
#    Within 2e-3 of each tensor's largest magnitude: the expert products run
#    over other batches of rows at EP 2, so gradients differ in their last
#    bits, and Adam moves an element whose gradient is that small by up to
#    about lr (1e-2) whatever its size (6.3e-4 seen after 6 steps; the
#    unit test expert_parallel_training_test checks the gradient norms, which
#    Adam's updates would hide, to 1e-5).
"$PY" "$HF/same_tensors.py" "$WORK/adapter1" "$WORK/adapter2" --rtol 2e-3 --label "adapter, EP 2 vs EP 1" ||
  fail "the adapter exported at EP 2 differs from EP 1's"
"$PY" "$HF/same_tensors.py" "$WORK/merged1" "$WORK/merged2" --rtol 2e-3 --label "merged, EP 2 vs EP 1" ||
  fail "the merged export at EP 2 differs from EP 1's"
"$PY" - "$HF" "$WORK/adapter2" "$projections" "$layers" "$experts" <<'PYEOF' || fail "the adapter file is not what PEFT reads"
import sys
sys.path.insert(0, sys.argv[1])
import safetensors_io
t = safetensors_io.read(sys.argv[2] + "/adapter_model.safetensors")
projections, layers, experts = map(int, sys.argv[3:6])
assert len(t) == 2 * projections, (len(t), sorted(t)[:4])
for i in range(layers):
    for e in range(experts):
        for w in ("w1", "w2", "w3"):
            for f in ("lora_A", "lora_B"):
                k = "base_model.model.model.layers.%d.block_sparse_moe.experts.%d.%s.%s.weight" % (i, e, w, f)
                assert k in t and t[k].numel() > 0, k
trained = [k for k, v in t.items() if "experts" in k and "lora_B" in k and v.abs().sum() > 0]
assert len(trained) == layers * experts * 3, "experts whose lora_B never trained: %d of %d" % (
    layers * experts * 3 - len(trained), layers * experts * 3)
print("adapter: %d tensors, every expert's w1/w2/w3 trained" % len(t))
PYEOF
"$DSGEN" --model "$WORK/merged2" --prompt_ids 1,20,30,41,5,66,7 --max_new_tokens 0 --dump_logits "$WORK/merged.logits" \
  >"$WORK/dsgen.out" 2>&1 || fail "dsgen on the merged export: $(cat "$WORK/dsgen.out")"
"$PY" "$HF/llama_reference.py" logits "$WORK/mixtral" 1,20,30,41,5,66,7 --adapter "$WORK/adapter2" \
  --compare "$WORK/merged.logits" --atol 2e-5 --rtol 2e-5 >"$WORK/reference.out" 2>&1 ||
  fail "the reference (base + adapter) disagrees with dsgen on the merged export: $(cat "$WORK/reference.out")"
"$PY" "$HF/llama_reference.py" logits "$WORK/mixtral" 1,20,30,41,5,66,7 --compare "$WORK/merged.logits" \
  --atol 2e-5 --rtol 2e-5 >/dev/null 2>&1 && fail "the merged export gives the base's logits: the adapter did nothing"
"$DSGEN" --model "$WORK/mixtral" --adapter "$WORK/adapter2" --prompt_ids 1,20,30,41,5,66,7 --max_new_tokens 0 \
  --dump_logits "$WORK/unmerged.logits" >"$WORK/dsgen_adapter.out" 2>&1 ||
  fail "dsgen --adapter: $(cat "$WORK/dsgen_adapter.out")"
"$PY" "$HF/llama_reference.py" logits "$WORK/mixtral" 1,20,30,41,5,66,7 --adapter "$WORK/adapter2" \
  --compare "$WORK/unmerged.logits" --atol 2e-5 --rtol 2e-5 >"$WORK/reference_adapter.out" 2>&1 ||
  fail "the reference disagrees with dsgen --adapter: $(cat "$WORK/reference_adapter.out")"
pass "the adapter and the merged export written at EP 2 are EP 1's; the reference's base + adapter = dsgen's merged and unmerged logits"

# 3. Stop after step 3 at EP 2 and resume: bit for bit.
set +e
"$DSLAUNCH" --num_gpus 4 "${COMMON[@]}" "${EP2[@]}" --override "checkpoint.dir=$WORK/ck" --override checkpoint.interval=3 "$CONFIG" \
  --loss_log "$WORK/first.tsv" --exit_at_step 3 >"$WORK/first.out" 2>&1
code=$?
set -e
((code == 1)) || fail "the first half should stop with 1 after step 3, got $code: $(tail -3 "$WORK/first.out")"
run_job second 4 "${EP2[@]}" --override "checkpoint.dir=$WORK/ck" --override checkpoint.interval=3
grep -q "resumed from $WORK/ck/global_step3" "$WORK/second.out" || fail "did not resume: $(grep -m3 dsrank "$WORK/second.out")"
cat "$WORK/first.tsv" "$WORK/second.tsv" >"$WORK/resumed.tsv"
cmp -s "$WORK/ep2.tsv" "$WORK/resumed.tsv" || fail "resumed losses differ: $(diff "$WORK/ep2.tsv" "$WORK/resumed.tsv" | head -4)"
pass "LoRA on the experts at EP 2: stopped after step 3 and resumed, bit for bit"

# 4. all-linear: attention, the router and the experts; the adapter's config
#    names what was adapted.
run_job all 4 "${EP2[@]}" --override 'lora.target_modules=[all-linear]' \
  --override "export.adapter_dir=$WORK/adapter_all"
# At EP 2 rank 0 holds half the experts and says so.
line=$(grep -m1 "dsrank: LoRA r=4 alpha=8 on" "$WORK/all.out") || fail "no LoRA line"
[[ $line =~ on\ ([0-9]+)\ projections.*\(rank\ 0\'s\ share:\ ([0-9]+)\ of\ the\ ([0-9]+)\ experts\ of\ each\ layer\) ]] ||
  fail "unexpected LoRA line: $line"
projections=${BASH_REMATCH[1]}
((BASH_REMATCH[2] * 2 == experts && BASH_REMATCH[3] == experts)) || fail "rank 0's share: $line"
((projections == layers * (5 + 3 * experts / 2))) || fail "all-linear adapted $projections projections on rank 0: $line"
"$PY" - "$WORK/adapter_all/adapter_config.json" <<'PYEOF' || fail "adapter_config.json: $(cat "$WORK/adapter_all/adapter_config.json")"
import json, sys
targets = json.load(open(sys.argv[1]))["target_modules"]
assert targets == ["q_proj", "k_proj", "v_proj", "o_proj", "gate", "w1", "w2", "w3"], targets
PYEOF
pass "all-linear on Mixtral: attention, the router and rank 0's experts, $projections projections; adapter_config.json names them"

# 5. At EP 2, LoRA on attention only: the experts stay frozen on their ranks
#    (no expert partition), the losses are EP 1's, and the merged export
#    gathers every rank's experts; targets that adapt one rank's experts and
#    not another's are refused before any step.
for ep in 1 2; do
  extra=()
  ((ep == 2)) && extra=("${EP2[@]}")
  run_job attention$ep 4 "${extra[@]}" --override 'lora.target_modules=[q_proj, v_proj]' \
    --override export.dtype=float32 --override "export.hf_dir=$WORK/attention_merged$ep"
done
same_losses attention1 attention2 "LoRA on attention only: EP 2 x DP 2 vs EP 1 x DP 4"
"$PY" "$HF/same_tensors.py" "$WORK/attention_merged1" "$WORK/attention_merged2" --rtol 2e-3 \
  --label "attention-only merged export, EP 2 vs EP 1" || fail "the attention-only export at EP 2 differs from EP 1's"
if "$DSLAUNCH" --num_gpus 4 "${COMMON[@]}" "${EP2[@]}" \
  --override 'lora.target_modules=[layers.1.block_sparse_moe.experts.3.w3]' "$CONFIG" \
  >"$WORK/refused.out" 2>"$WORK/refused.err"; then
  fail "LoRA on one rank's expert at EP 2 ran"
fi
grep -q "the experts of expert-parallel rank 0 match no target while rank 1's do" "$WORK/refused.err" ||
  fail "no refusal naming the targets: $(tail -3 "$WORK/refused.err")"
! grep -q "^step=" "$WORK/refused.out" || fail "a step ran before the refusal"
pass "LoRA on attention only at EP 2 takes EP 1's steps and exports every expert; one rank's expert alone is refused"
