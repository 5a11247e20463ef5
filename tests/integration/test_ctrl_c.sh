#!/usr/bin/env bash
# SIGINT / SIGTERM to dslaunch: every rank (and what ranks started) is gone,
# dslaunch exits 130 / 143. Ranks that ignore SIGTERM get SIGKILL after the grace.
source "$(dirname "$0")/lib.sh"

run_and_signal() {
  local signal=$1 expected=$2 extra=$3
  rm -rf "$WORK/pids" && mkdir -p "$WORK/pids"
  "$DSLAUNCH" --num_nodes 2 --num_gpus 2 --stop_grace_ms 500 "$TEST_RANK" --pid_dir "$WORK/pids" \
    --spawn_child --sleep_ms 120000 $extra >"$WORK/job.out" 2>"$WORK/job.err" &
  local launcher=$!
  CLEANUP_PIDS+=("$launcher")
  wait_until 30 files_at_least "$WORK/pids" 'child_*.pid' 4 || fail "ranks did not start"
  local agents
  agents=$(pgrep -P "$launcher" -f dsagent | tr '\n' ' ')
  [[ $(wc -w <<<"$agents") -eq 2 ]] || fail "expected 2 local agents, found '$agents'"
  kill "-$signal" "$launcher"
  set +e
  wait "$launcher"
  local code=$?
  set -e
  ((code == expected)) || fail "SIG$signal: exit $code, expected $expected"
  all_pids_gone "$WORK"/pids/rank_*.pid || fail "SIG$signal: a rank survived"
  all_pids_gone "$WORK"/pids/child_*.pid || fail "SIG$signal: a rank's child survived"
  local agent
  for agent in $agents; do pid_gone "$agent" || fail "SIG$signal: local agent $agent survived"; done
  pass "SIG$signal -> exit $expected, every rank and child gone $extra"
}

run_and_signal INT 130 ""
run_and_signal TERM 143 ""
run_and_signal INT 130 "--ignore_sigterm"
