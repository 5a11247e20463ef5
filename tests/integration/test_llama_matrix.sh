#!/usr/bin/env bash
# Issue 15's training matrix on the tiny Llama folder: ZeRO 0-3 x LoRA off/on
# x 1/2 ranks, sixteen cells. Every cell:
#  - trains: the held-out loss (validation split, eval every 4 steps) at
#    step 12 is below its value at step 4;
#  - gives its group's losses: within each LoRA mode every cell's losses are
#    the 1-rank ZeRO-0 cell's (the global batch is the same);
#  - resumes bit for bit: stopped after step 6 and resumed to 12, its losses
#    are its uninterrupted run's, exactly;
#  - exports: a Hugging Face folder (LoRA: the merged model and the PEFT
#    adapter folder) whose tensors are the 1-rank ZeRO-0 cell's export's.
source "$(dirname "$0")/lib.sh"
HF=$(cd "$(dirname "$0")/../hf" && pwd)
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/llama-tiny.cfg
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" -c 'import torch' 2>/dev/null || fail "$PY has no torch (scripts/setup.sh installs python3-torch)"
"$PY" "$HF/make_tiny_llama.py" "$WORK/tiny" llama3_gqa --seed 5
COMMON=(--override "model.from=$WORK/tiny" --override "data.prepared=$WORK/data/fortunes"
  --override train.steps=12 --override train.warmup_steps=2 --override train.global_batch_size=8
  --override train.eval_interval=4 --override train.eval_steps=2 --override checkpoint.interval=6
  --override export.dtype=float32 --override ds_config.zero_optimization.stage3_param_persistence_threshold=0)
LORA=(--override train.lr=1e-2 --override lora.r=4 --override lora.lora_alpha=8
  --override 'lora.target_modules=[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]')

cells=0
for mode in full lora; do
  extra=()
  [[ $mode == lora ]] && extra=("${LORA[@]}")
  for world in 1 2; do
    for stage in 0 1 2 3; do
      cell=${mode}_w${world}_z${stage}
      args=("${extra[@]+"${extra[@]}"}" --override ds_config.zero_optimization.stage=$stage
        --override train.micro_batch_size=$((8 / world)))
      exports=(--override "export.hf_dir=$WORK/$cell.hf")
      [[ $mode == lora ]] && exports+=(--override "export.adapter_dir=$WORK/$cell.adapter")
      run_job "$cell" "$world" "${args[@]}" "${exports[@]}" --override "checkpoint.dir=$WORK/$cell.ck_straight"

      # Held-out loss at step 4 and at step 12.
      first=$(sed -nE 's/.*eval step=4 loss=([0-9.]+).*/\1/p' "$WORK/$cell.out")
      last=$(sed -nE 's/.*eval step=12 loss=([0-9.]+).*/\1/p' "$WORK/$cell.out")
      [[ -n $first && -n $last ]] || fail "$cell: no held-out loss at steps 4 and 12: $(grep -m3 eval "$WORK/$cell.out" || true)"
      awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
        fail "$cell: the held-out loss did not fall (step 4: $first, step 12: $last)"
      [[ $cell == ${mode}_w1_z0 ]] || same_losses "${mode}_w1_z0" "$cell" "$cell vs ${mode}_w1_z0"

      # Stop after step 6 (exit 1 on purpose), resume to 12.
      set +e
      "$DSLAUNCH" --num_gpus "$world" "${COMMON[@]}" "${args[@]}" --override "checkpoint.dir=$WORK/$cell.ck" \
        --override 'export.hf_dir=""' "$CONFIG" --loss_log "$WORK/$cell.first.tsv" --exit_at_step 6 \
        >"$WORK/$cell.first.out" 2>&1
      code=$?
      set -e
      ((code == 1)) || fail "$cell: the first half should stop with 1 after step 6, got $code: $(tail -3 "$WORK/$cell.first.out")"
      run_job "$cell.second" "$world" "${args[@]}" --override "checkpoint.dir=$WORK/$cell.ck" --override 'export.hf_dir=""'
      cat "$WORK/$cell.first.tsv" "$WORK/$cell.second.tsv" >"$WORK/$cell.resumed.tsv"
      cmp -s "$WORK/$cell.tsv" "$WORK/$cell.resumed.tsv" ||
        fail "$cell: resumed losses differ: $(diff "$WORK/$cell.tsv" "$WORK/$cell.resumed.tsv" | head -4)"
      echo "$cell: held-out loss $first -> $last; stop at 6 and resume to 12: bit for bit"
      cells=$((cells + 1))
    done
  done
done
((cells == 16)) || fail "ran $cells cells, expected 16"

# Every cell's export against its mode's 1-rank ZeRO-0 export (one Python).
"$PY" - "$HF" "$WORK" <<'PYEOF' || fail "an export differs from its mode's 1-rank ZeRO-0 export"
import glob, os, sys
sys.path.insert(0, sys.argv[1])
import safetensors_io
work = sys.argv[2]

def tensors(folder):
    found = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        found.update(safetensors_io.read(path))
    assert found, f"{folder}: no tensors"
    assert all(t.numel() > 0 for t in found.values()), f"{folder}: an empty tensor"
    return found

bad = False
for mode, kinds in (("full", ["hf"]), ("lora", ["hf", "adapter"])):
    for kind in kinds:
        reference = tensors(f"{work}/{mode}_w1_z0.{kind}")
        for world in (1, 2):
            for stage in range(4):
                cell = f"{mode}_w{world}_z{stage}"
                got = tensors(f"{work}/{cell}.{kind}")
                if sorted(got) != sorted(reference):
                    print(f"{cell}.{kind}: other tensor names"); bad = True; continue
                worst = max(((got[k] - reference[k]).abs().max() / (reference[k].abs().max() + 1e-12)).item()
                            for k in reference)
                print(f"{cell}.{kind}: {len(got)} tensors, worst relative difference {worst:.2e}")
                bad = bad or worst > 1e-4
sys.exit(1 if bad else 0)
PYEOF
pass "ZeRO 0-3 x LoRA off/on x 1/2 ranks: all 16 cells train (held-out loss falls), match their mode's 1-rank ZeRO-0 losses and export, and resume bit for bit"
