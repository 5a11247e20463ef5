#!/usr/bin/env bash
# On the GPU host: the CPU Adam's thread count beside the training thread
# (issue 19). Trains gpt-1.3b at ZeRO-3 with offload_optimizer and
# offload_param on the CPU and the delayed update (the host step of step N
# runs beside step N+1's forward and backward), once per thread count in
# THREADS, REPEATS rounds, the counts interleaved within each round so that
# drift of the host hits every count alike. Prints each run's tokens/s over
# steps 3..STEPS and the host step's bandwidth, then each count's mean and
# spread.
#   THREADS="16 15"  (DSLAUNCH_CPU_ADAM_THREADS; "default" leaves it unset)
#   REPEATS=2 STEPS=8 LIMIT_GB=20
# Run with GPU_TARGETS="dsrank dslaunch dsagent" to build only the programs.
set -uo pipefail
limit=${LIMIT_GB:-20}
source "$(dirname "$0")/gpu-bench-env.sh"
cd "$root"
echo "host: $(nproc) cores available"
mean_tps() {  # LOG: mean tokens/s of steps 3 and later
  grep -oE 'step=[0-9]+ .*tokens/s=[0-9]+' "$1" | awk '{split($1, s, "="); if (s[2] >= 3) {sub(/.*tokens\/s=/, ""); t += $0; n++}}
    END {if (n) printf "%.0f", t / n}'
}
results="$out/cpu-adam-threads.tsv"
: >"$results"
for round in $(seq 1 "${REPEATS:-2}"); do
  for threads in ${THREADS:-16 15}; do
    log="$out/threads-$threads-round-$round.log"
    env_threads=()
    [[ $threads != default ]] && env_threads=(env "DSLAUNCH_CPU_ADAM_THREADS=$threads")
    "${env_threads[@]}" "$bin/dslaunch" --num_gpus 1 --override "data.prepared=$data/fortunes-all-byte" \
      --override ds_config.memory_breakdown=true --override ds_config.wall_clock_breakdown=true \
      --override train.warmup_steps=1 --override train.steps=${STEPS:-8} --override ds_config.steps_per_print=1 \
      --override ds_config.zero_optimization.stage=3 \
      --override ds_config.zero_optimization.offload_optimizer.device=cpu \
      --override ds_config.zero_optimization.offload_optimizer.delay_update=true \
      --override ds_config.zero_optimization.offload_param.device=cpu configs/gpt-1.3b.cfg \
      --cuda_memory_limit_gb "$limit" >"$log" 2>&1
    rc=$?
    tps=$(mean_tps "$log")
    host="$(grep -oE '[0-9.]+ GB/s of optimizer traffic' "$log" | tail -n 1); $(grep -oE 'waited for the host step [0-9.]+ s of its [0-9.]+ s' "$log" | tail -n 1)"
    printf 'round %d threads %-7s exit %d tokens/s %-7s %s\n' "$round" "$threads" "$rc" "${tps:-none}" "$host"
    [[ -n $tps ]] && printf '%s\t%s\n' "$threads" "$tps" >>"$results"
    [[ $rc == 0 ]] || tail -n 5 "$log"
  done
done
echo "threads  runs  mean tokens/s  min  max"
sort -k1,1 "$results" | awk -F'\t' '{n[$1]++; s[$1]+=$2; if (!($1 in lo) || $2 < lo[$1]) lo[$1]=$2; if ($2 > hi[$1]) hi[$1]=$2}
  END {for (t in n) printf "%-8s %4d  %13.0f  %5d  %5d\n", t, n[t], s[t]/n[t], lo[t], hi[t]}'
