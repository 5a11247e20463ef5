#!/usr/bin/env bash
# The control plane at cluster scale (Note [Agent simulator],
# tests/scale/simulated_agent.h): a real dslaunch (controller and rendezvous
# store) against dsagent_sim's simulated agents, all on this machine.
#
#   AGENTS="100 500 1000" RANKS_PER_AGENT=8 bash scripts/control-plane-scale.sh
#
# For each size: launch (dslaunch started -> every rank past the NCCL
# unique-id exchange of its world, tensor and data groups), fail-fast (one
# rank crashes -> the last StopJob answered), teardown (the crash -> dslaunch
# exited), heartbeat fan-in (RankProgress events per second reaching the
# controller during HOLD_MS, and the controller's CPU for them, in % of one
# core), the store's calls per second from the first StartRanks to the last
# rank past rendezvous, and the controller's peak memory and threads. Prints a Markdown table; BUILD_DIR (default build) holds the
# binaries; KEEP_DIR, when set, keeps each size's report and logs.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
DSLAUNCH="${DSLAUNCH:-$BUILD_DIR/bin/dslaunch}"
DSAGENT_SIM="${DSAGENT_SIM:-$BUILD_DIR/bin/dsagent_sim}"
AGENTS="${AGENTS:-100 500 1000}"
RANKS_PER_AGENT="${RANKS_PER_AGENT:-8}"
HOLD_MS="${HOLD_MS:-3000}"
HEARTBEAT_MS="${HEARTBEAT_MS:-1000}"
for binary in "$DSLAUNCH" "$DSAGENT_SIM"; do
  [[ -x "$binary" ]] || { echo "control-plane-scale: $binary is missing; build it: bash scripts/build.sh dslaunch dsagent_sim" >&2; exit 2; }
done
needed_fds=$(( $(echo "$AGENTS" | tr ' ' '\n' | sort -n | tail -1) * (RANKS_PER_AGENT + 3) + 1024 ))
if (( $(ulimit -Hn) < needed_fds )); then
  echo "control-plane-scale: the largest size needs $needed_fds open files; the hard limit is $(ulimit -Hn)" >&2
  exit 2
fi
ulimit -n "$(ulimit -Hn)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/dslaunch-scale.XXXXXX")"
SIM_PID=""
DSLAUNCH_PID=""
cleanup() {
  [[ -n "$DSLAUNCH_PID" ]] && kill -9 "$DSLAUNCH_PID" 2>/dev/null || true
  [[ -n "$SIM_PID" ]] && kill -9 "$SIM_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$WORK/token"
chmod 600 "$WORK/token"

value() { sed -n "s/^$1=//p" "$2"; }

echo "| agents | ranks | launch to past rendezvous (s) | StartRanks all answered (s) | fail-fast (ms) | teardown (ms) | heartbeat events/s | controller CPU for them (%) | store calls/s during rendezvous | controller peak RSS (MiB) | controller threads |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for agents in $AGENTS; do
  run="$WORK/$agents"
  mkdir -p "$run"
  "$DSAGENT_SIM" --agents "$agents" --ranks_per_agent "$RANKS_PER_AGENT" --address_file "$run/addresses" \
    --report "$run/report" --hold_ms "$HOLD_MS" --heartbeat_ms "$HEARTBEAT_MS" \
    --fail_agent $((agents / 2)) --timeout_s 120 --controller_pid_file "$run/controller.pid" > "$run/sim.log" 2>&1 &
  SIM_PID=$!
  while [[ ! -s "$run/addresses" ]]; do
    kill -0 "$SIM_PID" 2>/dev/null || { cat "$run/sim.log" >&2; exit 1; }
    sleep 0.05
  done
  start_us=$(date +%s%6N)
  "$DSLAUNCH" --agents "$(cat "$run/addresses")" --token_file "$WORK/token" --num_gpus "$RANKS_PER_AGENT" \
    --max_restarts 0 --job_id "scale-$agents" /bin/true > "$run/dslaunch.log" 2>&1 &
  DSLAUNCH_PID=$!
  echo "$DSLAUNCH_PID" > "$run/controller.pid"
  rc=0
  wait "$DSLAUNCH_PID" || rc=$?
  exit_us=$(date +%s%6N)
  DSLAUNCH_PID=""
  while [[ ! -s "$run/report" ]]; do
    kill -0 "$SIM_PID" 2>/dev/null || break
    sleep 0.05
  done
  kill -TERM "$SIM_PID" 2>/dev/null || true
  wait "$SIM_PID" 2>/dev/null || true
  SIM_PID=""
  report="$run/report"
  echo "start_us=$start_us" >> "$run/report"
  echo "exit_us=$exit_us" >> "$run/report"
  if [[ -n "${KEEP_DIR:-}" ]]; then mkdir -p "$KEEP_DIR" && cp -r "$run" "$KEEP_DIR/"; fi
  if [[ ! -s "$report" || "$(value ranks_past_rendezvous "$report")" != "$((agents * RANKS_PER_AGENT))" || $rc -eq 0 ]]; then
    echo "control-plane-scale: the run with $agents agents did not go as planned (dslaunch rc $rc):" >&2
    cat "$run/sim.log" "$report" 2>/dev/null >&2 || true
    tail -20 "$run/dslaunch.log" >&2
    exit 1
  fi
  grep -q "rank $(( agents / 2 * RANKS_PER_AGENT )) on sim-$((agents / 2)) exited with code 1" "$run/dslaunch.log" || {
    echo "control-plane-scale: dslaunch did not name the crashed rank:" >&2; tail -20 "$run/dslaunch.log" >&2; exit 1; }
  awk -v agents="$agents" -v ranks="$((agents * RANKS_PER_AGENT))" -v start="$start_us" -v exit_us="$exit_us" \
      -v rdv="$(value rendezvous_done_us "$report")" -v started="$(value last_start_ranks_us "$report")" \
      -v first="$(value first_start_ranks_us "$report")" -v end="$(value end_us "$report")" \
      -v stop="$(value last_stop_us "$report")" -v events="$(value heartbeat_events "$report")" \
      -v hold="$(value hold_seconds "$report")" -v cpu="$(value controller_cpu_during_hold_s "$report")" \
      -v calls="$(value store_calls "$report")" -v rss="$(value controller_peak_rss_kib "$report")" \
      -v threads="$(value controller_threads "$report")" \
      'BEGIN { printf "| %d | %d | %.2f | %.2f | %.1f | %.1f | %.0f | %.1f | %.0f | %.0f | %d |\n",
               agents, ranks, (rdv - start) / 1e6, (started - start) / 1e6, (stop - end) / 1e3,
               (exit_us - end) / 1e3, events / hold, 100 * cpu / hold, calls / ((rdv - first) / 1e6),
               rss / 1024, threads }'
done
