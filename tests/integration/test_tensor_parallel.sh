#!/usr/bin/env bash
# Tensor parallelism through dslaunch (issue 16): gpt-tiny as TP 2 on 2 ranks
# (with and without sequence parallelism) and as TP 2 x DP 2 on 4 ranks at
# ZeRO-1 and ZeRO-3 gives the per-step losses of one rank, with dropout too
# (resumed or not).
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?DSRANK must point at the dsrank binary}"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg
COMMON=(--override "data.prepared=$WORK/data/fortunes" --override train.eval_interval=0 --override 'checkpoint.dir=""'
  --override train.global_batch_size=8 --override train.steps=8 --override train.warmup_steps=2)

run_job one 1 --override train.micro_batch_size=8
run_job tp2 2 --override ds_config.tensor_parallel.tp_size=2 --override train.micro_batch_size=8
same_losses one tp2 "TP 2 vs 1 rank"
run_job tp2sp 2 --override ds_config.tensor_parallel.tp_size=2 --override model.sequence_parallel=true \
  --override train.micro_batch_size=8
same_losses one tp2sp "TP 2 with sequence parallelism vs 1 rank"
pass "TP 2 (sequence parallel on and off) gives the losses of one rank"

for stage in 1 3; do
  run_job tp2dp2z$stage 4 --override ds_config.tensor_parallel.tp_size=2 --override train.micro_batch_size=4 \
    --override ds_config.zero_optimization.stage=$stage \
    --override ds_config.zero_optimization.stage3_param_persistence_threshold=0
  same_losses one tp2dp2z$stage "TP 2 x DP 2 at ZeRO-$stage vs 1 rank"
done
pass "TP 2 x DP 2 at ZeRO-1 and ZeRO-3 gives the losses of one rank"

# A TP 2 x DP 2 checkpoint at step 4, resumed by one rank (TP 1) and by TP 2
# x DP 1: steps 5-8 give the uninterrupted losses.
same_steps() {  # A B LABEL: the losses of the steps both logs hold
  awk -v label="$3" 'NR == FNR { a[$1] = $2; next } ($1 in a) { n++; d = a[$1] - $2; if (d < 0) d = -d; r = d / a[$1]
      if (r > worst) worst = r; if (r > 1e-4) bad = 1 }
    END { printf "%s: worst relative loss difference %.2e over %d steps\n", label, worst, n; exit bad || n == 0 }' \
    "$WORK/$1.tsv" "$WORK/$2.tsv" || fail "$3: losses differ"
}
for resumed in "1 1" "2 2"; do
  read -r world tp <<<"$resumed"
  rm -rf "$WORK/ckpt"
  run_job saved$world 4 --override ds_config.tensor_parallel.tp_size=2 --override train.micro_batch_size=4 \
    --override ds_config.zero_optimization.stage=1 --override "checkpoint.dir=$WORK/ckpt" --override checkpoint.interval=4 \
    --override train.steps=4
  run_job resumed$world $world --override ds_config.tensor_parallel.tp_size=$tp --override train.micro_batch_size=8 \
    --override ds_config.zero_optimization.stage=1 --override "checkpoint.dir=$WORK/ckpt" --override checkpoint.interval=4
  ! grep -q "^[1-4]	" "$WORK/resumed$world.tsv" || fail "resumed at TP $tp: steps 1-4 ran again"
  same_steps one resumed$world "TP 2 x DP 2 checkpoint resumed at TP $tp on $world rank(s) vs 1 rank"
done
pass "a TP 2 x DP 2 checkpoint resumes at TP 1 and at TP 2 x DP 1"

# Dropout (Note [Dropout streams]): TP 2 with sequence parallelism applies
# one rank's masks, and a job resumed at step 4 draws what the uninterrupted
# one drew.
DROP=(--override model.dropout=0.1 --override ds_config.zero_optimization.stage=1)
run_job drop1 1 "${DROP[@]}" --override train.micro_batch_size=8
paste "$WORK/one.tsv" "$WORK/drop1.tsv" | awk '$1 > 1 && $2 != $4 { differ = 1 } END { exit !differ }' ||
  fail "model.dropout=0.1 left the losses of steps 2-8 unchanged"
run_job drop_tp2 2 "${DROP[@]}" --override ds_config.tensor_parallel.tp_size=2 --override model.sequence_parallel=true \
  --override train.micro_batch_size=8
same_losses drop1 drop_tp2 "dropout 0.1 at TP 2 (sequence parallel) vs 1 rank"
# Recomputed blocks whose saved inputs are partitioned across the tensor
# group (partition_activations, Note [Partitioned activations]).
run_job drop_tp2_part 2 "${DROP[@]}" --override ds_config.tensor_parallel.tp_size=2 --override train.micro_batch_size=8 \
  --override ds_config.activation_checkpointing.number_checkpoints=2 \
  --override ds_config.activation_checkpointing.partition_activations=true
same_losses drop1 drop_tp2_part "dropout 0.1 at TP 2, recomputed blocks with partitioned inputs, vs 1 rank"
rm -rf "$WORK/ckpt"
run_job drop_saved 2 "${DROP[@]}" --override ds_config.tensor_parallel.tp_size=2 --override model.sequence_parallel=true \
  --override train.micro_batch_size=8 --override "checkpoint.dir=$WORK/ckpt" --override checkpoint.interval=4 \
  --override train.steps=4
run_job drop_resumed 2 "${DROP[@]}" --override ds_config.tensor_parallel.tp_size=2 --override model.sequence_parallel=true \
  --override train.micro_batch_size=8 --override "checkpoint.dir=$WORK/ckpt" --override checkpoint.interval=4
! grep -q "^[1-4]	" "$WORK/drop_resumed.tsv" || fail "the dropout job resumed at step 4 ran steps 1-4 again"
same_steps drop1 drop_resumed "dropout 0.1 at TP 2, resumed at step 4, vs 1 rank uninterrupted"
pass "dropout at TP 2 (sequence parallel, or recomputed with partitioned inputs) gives one rank's losses, resumed or not"

# Placement: a tensor group must sit on one host; --dry_run shows the grid.
printf 'worker-a slots=3\nworker-b slots=3\n' >"$WORK/hosts"
set +e
"$DSLAUNCH" --dry_run --hostfile "$WORK/hosts" "${COMMON[@]}" --override ds_config.tensor_parallel.tp_size=2 \
  --override train.micro_batch_size=2 --override train.global_batch_size=6 "$CONFIG" >"$WORK/hosts.out" 2>"$WORK/hosts.err"
code=$?
set -e
((code == 2)) || fail "tp_size 2 on hosts of 3 slots exited $code, expected 2"
grep -q "tensor_parallel.tp_size=2 does not divide the 3 slot(s) used on host worker-a" "$WORK/hosts.err" ||
  fail "no refusal naming tp_size and the host's slots: $(cat "$WORK/hosts.err")"
"$DSLAUNCH" --dry_run --num_gpus 4 "${COMMON[@]}" --override ds_config.tensor_parallel.tp_size=2 \
  --override train.micro_batch_size=4 "$CONFIG" >"$WORK/dry.out" 2>"$WORK/dry.err" || fail "dry run exited $?"
grep -q "rank 3: host .*, (pipe, data, model) = (0, 1, 1)" "$WORK/dry.out" || fail "no grid coordinates: $(grep '^rank 3' "$WORK/dry.out")"
pass "tp_size 2 on hosts of 3 slots is refused naming both; --dry_run shows each rank's (pipe, data, model)"

# A Llama-family Hugging Face folder (GQA) at TP 2: each rank loads its slices;
# the losses are one rank's; with lr 0 the export at TP 2 x DP 2 (ZeRO-3) holds
# exactly the folder's tensors.
HF=$(cd "$(dirname "$0")/../hf" && pwd)
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" -c 'import torch' 2>/dev/null || fail "$PY has no torch (scripts/setup.sh installs python3-torch)"
"$PY" "$HF/make_tiny_llama.py" "$WORK/tiny" llama3_gqa --shards 2 --seed 3
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/llama-tiny.cfg
COMMON=(--override "model.from=$WORK/tiny" --override "data.prepared=$WORK/data/fortunes"
  --override train.eval_interval=0 --override 'checkpoint.dir=""' --override 'export.hf_dir=""'
  --override train.global_batch_size=8 --override train.steps=6)
run_job llama1 1 --override train.micro_batch_size=8
run_job llama_tp2 2 --override ds_config.tensor_parallel.tp_size=2 --override model.sequence_parallel=true \
  --override train.micro_batch_size=8
same_losses llama1 llama_tp2 "Llama from a Hugging Face folder at TP 2 (sequence parallel) vs 1 rank"
run_job llama_export 4 --override ds_config.tensor_parallel.tp_size=2 --override train.micro_batch_size=4 \
  --override train.steps=3 --override train.lr=0 --override train.warmup_steps=0 --override train.min_lr=0 \
  --override ds_config.zero_optimization.stage=3 --override ds_config.zero_optimization.stage3_param_persistence_threshold=0 \
  --override "export.hf_dir=$WORK/tp_hf" --override export.dtype=float32
"$PY" "$HF/same_tensors.py" "$WORK/tiny" "$WORK/tp_hf" --label "TP 2 export" || fail "the TP 2 export differs from the folder"
pass "a Hugging Face Llama folder trains at TP 2 like one rank, and exports back exactly at TP 2 x DP 2"
