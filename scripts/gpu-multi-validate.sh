#!/usr/bin/env bash
# On one host with G >= 2 GPUs, one command for the multi-GPU validation:
#   bash scripts/gpu-multi-validate.sh          (G = every GPU nvidia-smi lists)
# Environment: SIZES (world sizes to try, default "2 4 8" capped at G),
# SECTIONS (default "equivalence collectives scaling failfast": run a subset
# to fit a time limit per call), SKIP_SCALING=1, SKIP_PYTORCH=1. Results go to
# $OUT (or gpu-out/).
#  1. ZeRO 0/1/2/3 equivalence with NCCL: gpt-tiny in fp32 (LibTorch leaves
#     TF32 off), global batch 32, 12 steps, at each world size against world
#     size 1: only the order of floating-point sums differs, so the per-step
#     losses must agree within 1e-4 relative (a wrong batch moves them ~1e-2),
#     as the CPU test does (tests/integration/test_train_gpt.sh).
#  2. Collective bus bandwidth through the Communicator (dscomm_bench, 1 MB -
#     1 GB) next to NCCL through PyTorch (scripts/bench/pytorch_collectives.py).
#  3. Data-parallel scaling: tokens/s of ~350M and ~1.3B (sequence 1024, bf16,
#     micro batch 16 and 8 per GPU) at 1..G GPUs for ZeRO-1, ZeRO-2, ZeRO-2
#     with overlap_comm and ZeRO-3;
#     efficiency = tokens/s(G) / (G · tokens/s(1)), against the same
#     configuration's one GPU and the model's fastest one-GPU run; the target
#     is >= 90% at 8 for ZeRO-1/2.
#  4. Fail-fast with NCCL: SIGKILL of one rank mid-step under --max_restarts 1
#     with checkpoints every 25 steps: every other rank gone within 1 s (the
#     controller's events.jsonl), a restart from the last committed
#     checkpoint, and final losses equal to an uninterrupted run's (within
#     1e-4 relative: GPU kernels need not sum in the same order every run).
# NVLink multicast stays off in every rank (gpu-bench-env.sh exports
# NCCL_NVLS_ENABLE=0, and dslaunch passes NCCL_* through).
set -uo pipefail
source "$(dirname "$0")/gpu-bench-env.sh"
ninja -C "$root/build-gpu" dscomm_bench >>"$out/build.log" 2>&1 || { tail -n 20 "$out/build.log"; exit 1; }
cd "$root"
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
sizes=""
# World sizes that divide the global batch of 32 and fit on this host.
for g in ${SIZES:-2 4 8}; do ((g <= gpus && 32 % g == 0)) && sizes="$sizes $g"; done
[[ -n $sizes ]] || { echo "gpu-multi-validate: this host has $gpus GPU(s); it needs 2 or more"; exit 2; }
echo "GPUs: $gpus; world sizes:$sizes"
status=0
want() { [[ " ${SECTIONS:-equivalence collectives scaling failfast} " == *" $1 "* ]]; }
# dsrank appends to loss logs: start from empty ones.
rm -f "$out"/eq-zero*.tsv "$out"/ff-ref.tsv "$out"/ff-kill.tsv

# 1. Equivalence.
if want equivalence; then
  tiny=(--override "data.prepared=$data/fortunes-byte" --override train.eval_interval=0 --override train.steps=12
        --override train.warmup_steps=4 --override train.precision=fp32 --override checkpoint.resume=false
        --override 'checkpoint.dir=""' --override train.global_batch_size=32)
  for stage in 0 1 2 3; do
    for world in 1 $sizes; do
      # Persistence threshold 0: gpt-tiny's units are all below the default, so
      # stage 3 would otherwise partition nothing.
      "$bin/dslaunch" --num_gpus $world "${tiny[@]}" --override train.micro_batch_size=$((32 / world)) \
        --override ds_config.zero_optimization.stage=$stage \
        --override ds_config.zero_optimization.stage3_param_persistence_threshold=0 configs/gpt-tiny.cfg \
        --loss_log "$out/eq-zero$stage-w$world.tsv" >"$out/eq-zero$stage-w$world.log" 2>&1 ||
        { echo "ZeRO-$stage world $world: exit $?"; tail -n 5 "$out/eq-zero$stage-w$world.log"; status=1; }
    done
    for world in $sizes; do
      paste "$out/eq-zero$stage-w1.tsv" "$out/eq-zero$stage-w$world.tsv" | awk -v s=$stage -v w=$world '
        { d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r; if (r > 1e-4) bad = 1 }
        END { printf "ZeRO-%d world %d vs 1: worst relative loss difference %.2e over %d steps%s\n",
              s, w, worst, NR, (bad || NR != 12) ? "  FAIL" : ""; exit (bad || NR != 12) }' || status=1
    done
  done
fi

# 2. Collectives.
if want collectives; then
  for world in $sizes; do
    "$bin/dslaunch" --num_gpus $world "$bin/dscomm_bench" 2>&1 | sed 's/^\[[^]]*\] //' | tee "$out/comm-w$world.log" |
      grep -v '^dslaunch' || status=1
    if [[ -z ${SKIP_PYTORCH:-} ]]; then
      python3 -m torch.distributed.run --standalone --nproc_per_node $world scripts/bench/pytorch_collectives.py \
        2>"$out/comm-pytorch-w$world.err" | tee "$out/comm-pytorch-w$world.log" || status=1
    fi
  done
fi

# 3. Scaling.
if want scaling && [[ -z ${SKIP_SCALING:-} ]]; then
  : >"$out/scaling.tsv"
  for model in 350m 1.3b; do
    case $model in
      350m) shape=(24 16 1024) micro=16 ;;
      1.3b) shape=(24 16 2048) micro=8 ;;
    esac
    for run in 1 2 2-overlap 3; do
      stage=${run%%-*} extra=()
      # DeepSpeed's default leaves overlap_comm off below stage 3; the
      # overlapped row reduce-scatters each block's gradients during backward.
      [[ $run == *-overlap ]] && extra=(--override ds_config.zero_optimization.overlap_comm=true)
      for world in 1 $sizes; do
        log="$out/scale-$model-zero$run-w$world.log"
        "$bin/dslaunch" --num_gpus $world --override "data.prepared=$data/fortunes-all-byte" \
          --override model.layers=${shape[0]} --override model.heads=${shape[1]} --override model.width=${shape[2]} \
          --override model.vocab_size=50304 --override train.micro_batch_size=$micro \
          --override train.global_batch_size=$((micro * world)) --override train.steps=20 \
          --override ds_config.steps_per_print=10 --override ds_config.zero_optimization.stage=$stage \
          "${extra[@]}" configs/gpt-124m.cfg >"$log" 2>&1
        # tokens/s over steps 11-20 (the first ten warm up).
        tps=$(grep -o 'step=20 .*tokens/s=[0-9]*' "$log" | sed 's/.*tokens\/s=//')
        if [[ -z $tps ]]; then
          tail -n 5 "$log"
          status=1
          tps=FAILED
        fi
        printf '%s\t%s\t%s\t%s\n' $model $run $world $tps >>"$out/scaling.tsv"
      done
    done
  done
  # Efficiency = tokens/s(G) / (G · tokens/s(1)), against the same
  # configuration's one GPU and against the model's fastest one-GPU run (an
  # option that only pays off with several GPUs must not flatter itself).
  awk -F'\t' '
    { model[NR] = $1; run[NR] = $2; world[NR] = $3; tps[NR] = $4
      if ($3 == 1 && $4 != "FAILED") { own[$1 "/" $2] = $4; if ($4 > best[$1]) best[$1] = $4 } }
    END {
      printf "%-8s %-14s %5s %12s %15s %17s\n", "model", "zero", "gpus", "tokens/s", "eff. vs own 1", "eff. vs best 1"
      for (i = 1; i <= NR; ++i) {
        key = model[i] "/" run[i]
        if (tps[i] == "FAILED" || !(key in own)) { printf "%-8s ZeRO-%-9s %5d %12s\n", model[i], run[i], world[i], tps[i]; continue }
        printf "%-8s ZeRO-%-9s %5d %12.0f %14.1f%% %16.1f%%\n", model[i], run[i], world[i], tps[i],
               100 * tps[i] / (world[i] * own[key]), 100 * tps[i] / (world[i] * best[model[i]])
      }
    }' "$out/scaling.tsv" | tee "$out/scaling.txt"
fi

# 4. Fail-fast and restart with NCCL at the largest world size. gpt-tiny
#    steps take milliseconds on these GPUs, so the job is long (200 steps) and
#    the victim's pid is found before the kill step comes.
world=${sizes##* }
if want failfast; then
  steps=200
  ff=(--num_gpus $world --max_restarts 1 --restart_backoff_ms 0 --log_dir "$out/ff-logs"
      --override "data.prepared=$data/fortunes-byte" --override train.eval_interval=0 --override train.steps=$steps
      --override train.warmup_steps=4 --override train.global_batch_size=32
      --override train.micro_batch_size=$((32 / world)) --override checkpoint.interval=25)
  rm -rf "$out/ff-ref" "$out/ff-kill" "$out/ff-logs"
  "$bin/dslaunch" "${ff[@]}" --job_id ff-ref --override "checkpoint.dir=$out/ff-ref" configs/gpt-tiny.cfg \
    --loss_log "$out/ff-ref.tsv" >"$out/ff-ref.log" 2>&1 || { echo "uninterrupted run: exit $?"; status=1; }
  "$bin/dslaunch" "${ff[@]}" --job_id ff-kill --override "checkpoint.dir=$out/ff-kill" configs/gpt-tiny.cfg \
    --loss_log "$out/ff-kill.tsv" >"$out/ff-kill.log" 2>&1 &
  launcher=$!
  victim=""
  for _ in $(seq 3000); do  # up to ~60 s for the rank to start
    for proc in /proc/[0-9]*; do
      env=$(tr '\0' '\n' 2>/dev/null <"$proc/environ") || continue
      if grep -qx 'DSLAUNCH_JOB_ID=ff-kill' <<<"$env" && grep -qx "RANK=$((world - 1))" <<<"$env"; then
        victim=${proc#/proc/}
        break 2
      fi
    done
    sleep 0.02
  done
  killed_at=""
  if [[ -n $victim ]]; then
    for _ in $(seq 6000); do  # up to ~60 s to reach step 40
      if (($( [[ -f $out/ff-kill.tsv ]] && wc -l <"$out/ff-kill.tsv" || echo 0) >= 40)); then
        kill -9 "$victim" && killed_at=$(wc -l <"$out/ff-kill.tsv")
        break
      fi
      sleep 0.01
    done
  fi
  [[ -n $killed_at ]] || { echo "fail-fast: rank $((world - 1)) of ff-kill was not found or not killed by step 40"; status=1; }
  wait "$launcher" || { echo "killed run: exit $?"; status=1; }
  resumed=$(grep -o "resumed from $out/ff-kill/global_step[0-9]*" "$out/ff-kill.log" | head -n 1)
  grep -q "rank $((world - 1)) on .* was killed by signal 9" "$out/ff-kill.log" ||
    { echo "fail-fast: the controller did not report the SIGKILL"; status=1; }
  [[ -n $resumed ]] || { echo "fail-fast: the restart did not resume from a checkpoint"; status=1; }
  python3 - "$out/ff-logs/ff-kill/events.jsonl" "$out/ff-ref.tsv" "$out/ff-kill.tsv" "$steps" "${resumed:-none}" \
    "${killed_at:-none}" <<'PYEOF' || status=1
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
recovery = [e for e in events if e["event"] == "recovery"]
steps, resumed, killed_at = int(sys.argv[4]), sys.argv[5], sys.argv[6]
def final(path):
    last = {}
    for line in open(path):
        step, loss = line.split()
        last[int(step)] = float(loss)
    return last
ref, killed = final(sys.argv[2]), final(sys.argv[3])
gone_us = recovery[0].get("failure_to_gone_us") if recovery else None
gone = gone_us / 1e3 if gone_us is not None else float("inf")
# GPU kernels may sum in a different order from run to run (atomics in
# attention backward), so "equal" is the equivalence tolerance, not bits.
worst = max((abs(ref[s] - killed.get(s, float("inf"))) / ref[s] for s in ref), default=float("inf"))
same = len(ref) == steps and worst <= 1e-4
ok = gone < 1000 and same and resumed != "none"
print(f"fail-fast with NCCL: rank killed after step {killed_at}; every other rank gone {gone:.0f} ms later; "
      f"{resumed}; final losses within {worst:.1e} relative of the uninterrupted run{'' if ok else '  FAIL'}")
sys.exit(0 if ok else 1)
PYEOF
fi
exit $status
