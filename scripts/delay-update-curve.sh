#!/usr/bin/env bash
# Note [Delayed parameter update]: its effect on convergence, measured. Trains
# the same job twice with ZeRO-2 and CPU offload, once with the plain update
# and once with offload_optimizer.delay_update, from the same seed on the same
# batches, and prints both loss curves (the csv_monitor's train_loss, averaged
# over windows) side by side with their difference.
#
#   bash scripts/delay-update-curve.sh                       # this machine: gpt-tiny on the CPU
#   CONFIG=configs/gpt-124m.cfg STEPS=300 DSLAUNCH=build-gpu/bin/dslaunch \
#     EXTRA="--override data.prepared=.gpu-data/fortunes-all-byte" bash scripts/delay-update-curve.sh
#
# Environment: CONFIG (configs/gpt-tiny.cfg), STEPS (300), WINDOW (steps per
# printed row, 25), DSLAUNCH (build/bin/dslaunch), NUM_GPUS (1), EXTRA (more
# dslaunch arguments), OUT (where the runs' logs and CSV files go; a temp
# folder otherwise), WARMUP (N > 0: a third run, delayed after N plain steps,
# offload_optimizer.delay_update_warmup_steps, as the ZeRO-Offload paper does).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
config=${CONFIG:-configs/gpt-tiny.cfg}
steps=${STEPS:-300}
window=${WINDOW:-25}
dslaunch=${DSLAUNCH:-$root/build/bin/dslaunch}
out=${OUT:-$(mktemp -d /tmp/delay-update-curve.XXXXXX)}
mkdir -p "$out"
[[ -x $dslaunch ]] || { echo "delay-update-curve: $dslaunch is not built (scripts/build.sh dslaunch dsagent dsrank)" >&2; exit 2; }
# shellcheck disable=SC2206
extra=(${EXTRA:-})

runs=(false true)
((${WARMUP:-0} > 0)) && runs+=(warmup)
for run in "${runs[@]}"; do
  delay=$run
  warmup=()
  if [[ $run == warmup ]]; then
    delay=true
    warmup=(--override "ds_config.zero_optimization.offload_optimizer.delay_update_warmup_steps=$WARMUP")
  fi
  "$dslaunch" --num_gpus "${NUM_GPUS:-1}" --override train.steps="$steps" --override 'checkpoint.dir=""' \
    --override ds_config.zero_optimization.stage=2 \
    --override ds_config.zero_optimization.offload_optimizer.device=cpu \
    --override ds_config.zero_optimization.offload_optimizer.delay_update=$delay "${warmup[@]}" \
    --override ds_config.csv_monitor.enabled=true --override "ds_config.csv_monitor.output_path=$out" \
    --override ds_config.csv_monitor.job_name="delay-$run" "${extra[@]}" "$config" >"$out/delay-$run.log" 2>&1 ||
    { tail -n 20 "$out/delay-$run.log"; exit 1; }
done

plain="$out/delay-false/Train_Samples_train_loss.csv"
delayed="$out/delay-true/Train_Samples_train_loss.csv"
# With WARMUP: the warmed-up run's column; without it, the delayed one again (not printed).
warmed="$out/delay-${runs[-1]}/Train_Samples_train_loss.csv"
for f in "$plain" "$delayed" "$warmed"; do [[ -s $f ]] || { echo "delay-update-curve: $f is missing" >&2; exit 1; }; done
echo "$config, $steps steps, ZeRO-2 + CPU offload: mean train_loss per window of $window steps"
paste -d, <(tail -n +2 "$plain") <(tail -n +2 "$delayed") <(tail -n +2 "$warmed") | awk -F, -v w="$window" -v warm="${WARMUP:-0}" '
  function row_out(first, last, n) {
    if (warm > 0) printf "| %d-%d | %.4f | %.4f | %+.4f | %.4f | %+.4f |\n", first, last, a / n, b / n, (b - a) / n, c / n, (c - a) / n
    else printf "| %d-%d | %.4f | %.4f | %+.4f |\n", first, last, a / n, b / n, (b - a) / n
  }
  BEGIN {
    if (warm > 0) printf "| steps | plain | delay_update | difference | delay after %d plain steps | difference |\n|---|---|---|---|---|---|\n", warm
    else printf "| steps | plain | delay_update | difference |\n|---|---|---|---|\n"
  }
  { a += $2; b += $4; c += $6; n++; row++
    if (n == w) { row_out(row - w + 1, row, n); a = b = c = n = 0 } }
  END { if (n) row_out(row - n + 1, row, n) }'
echo "(logs and CSV files in $out)"
