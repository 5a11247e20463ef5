#!/usr/bin/env bash
# Note [Honest exits] (launcher/job_controller.h), issue 13 finding 1: a job
# whose ranks someone else stopped never exits 0.
#  1. dslaunch SIGSTOPped past its 1 s lease: the agent stops the rank; once
#     continued, dslaunch exits 1 naming its own freeze (it used to exit 0,
#     "succeeded").
#  2. Frozen past the keep-alive window: the event stream breaks; the cause
#     is the freeze, not a lost host.
# Exit codes and events.jsonl agree in every case. A StopJob that dslaunch did
# not send used to be case 3 (exit 1, naming its caller); since Note [Per-job
# credentials] no one but the job's own dslaunch can send one, and
# test_job_credentials.sh checks that it is refused. The controller's unit
# tests keep the message (JobControllerStopTest).
source "$(dirname "$0")/lib.sh"

# events_field JOB EVENT FIELD: the field of the job's last EVENT line.
events_field() {
  grep "\"event\":\"$2\"" "$WORK/logs/$1/events.jsonl" | tail -n 1 |
    sed -E "s/.*\"$3\":(\"([^\"]*)\"|([-0-9a-z]+)).*/\2\3/"
}

# expect_exit JOB CODE END: dslaunch exited CODE, and the event log says so.
expect_exit() {
  local job=$1 code=$2 end=$3
  [[ $(events_field "$job" job_end exit_code) == "$code" ]] ||
    fail "$job: job_end exit_code $(events_field "$job" job_end exit_code), dslaunch exited $code"
  [[ $(events_field "$job" job_end state) == JOB_FAILED ]] || fail "$job: job_end state"
  [[ $(events_field "$job" attempt_end end) == "$end" ]] ||
    fail "$job: attempt_end end $(events_field "$job" attempt_end end), expected $end"
}

# --- 1. Frozen past the lease -------------------------------------------------
mkdir -p "$WORK/pids1"
"$DSLAUNCH" --num_gpus 1 --lease_ms 1000 --stop_grace_ms 500 --job_id frozen --log_dir "$WORK/logs" \
  "$TEST_RANK" --pid_dir "$WORK/pids1" --sleep_ms 60000 >"$WORK/frozen.out" 2>"$WORK/frozen.err" &
launcher=$!
CLEANUP_PIDS+=("$launcher")
wait_until 30 files_at_least "$WORK/pids1" 'rank_0.pid' 1 || fail "the rank did not start"
rank=$(cat "$WORK/pids1/rank_0.pid")
kill -STOP "$launcher"
# The agent hears nothing for its 1 s lease and stops the rank by itself.
wait_until 30 pid_gone "$rank" || { kill -CONT "$launcher"; fail "the agent did not stop the rank of a frozen dslaunch"; }
kill -CONT "$launcher"
set +e
wait "$launcher"
code=$?
set -e
((code == 1)) || fail "frozen dslaunch exited $code, expected 1"
# Running again, dslaunch hears first either the rank its agent stopped or
# (its own 250 ms keep-alive ping overdue) that the stream broke; both name
# the freeze and the leases.
leases="the agents' leases \\(1000 ms\\) expired"  # an extended regular expression
grep -qE "root cause: dslaunch was frozen for [0-9]+ ms \(SIGSTOP\?\) and ($leases: the agent on localhost lost the controller for [0-9]+ ms and stopped rank 0|lost its event stream from localhost meanwhile .*; $leases too)" \
  "$WORK/frozen.err" || fail "frozen: no root cause naming the freeze: $(cat "$WORK/frozen.err")"
grep -q '"event":"controller_frozen"' "$WORK/logs/frozen/events.jsonl" || fail "frozen: no controller_frozen event"
if grep -qE "$leases: the agent on localhost" "$WORK/frozen.err"; then
  [[ $(events_field frozen rank_stopped stop_reason) == STOP_LEASE_EXPIRED ]] || fail "frozen: rank_stopped event"
fi
expect_exit frozen 1 ATTEMPT_CONTROLLER_FROZEN
pass "frozen past the lease: exit 1, $(grep -o 'root cause: dslaunch was frozen for [0-9]* ms' "$WORK/frozen.err")"

# --- 2. Frozen past the keep-alive window ---------------------------------------
# With the default 10 s lease the rank outlives the freeze, but the agent's
# gRPC keep-alive (2 s + 2 s) closes the connection of the silent dslaunch.
mkdir -p "$WORK/pids2"
"$DSLAUNCH" --num_gpus 1 --stop_grace_ms 500 --job_id stream --log_dir "$WORK/logs" \
  "$TEST_RANK" --pid_dir "$WORK/pids2" --sleep_ms 60000 >"$WORK/stream.out" 2>"$WORK/stream.err" &
launcher=$!
CLEANUP_PIDS+=("$launcher")
wait_until 30 files_at_least "$WORK/pids2" 'rank_0.pid' 1 || fail "the rank did not start"
rank=$(cat "$WORK/pids2/rank_0.pid")
port=$(sed -nE 's/.*listening on 127\.0\.0\.1:([0-9]+),.*/\1/p' "$WORK/logs/stream/agent_localhost.log" | head -n 1)
[[ -n $port ]] || fail "no agent port in $(cat "$WORK/logs/stream/agent_localhost.log")"
kill -STOP "$launcher"
# The agent closed its side: dslaunch's end of the connection waits in CLOSE-WAIT.
connection_closed() { [[ -n $(ss -Htn state close-wait "( dport = :$port )" 2>/dev/null) ]]; }
wait_until 60 connection_closed || { kill -CONT "$launcher"; fail "the agent kept the frozen controller's connection"; }
kill -CONT "$launcher"
set +e
wait "$launcher"
code=$?
set -e
((code == 1)) || fail "stream: dslaunch exited $code, expected 1"
grep -q 'root cause: dslaunch was frozen for [0-9]* ms (SIGSTOP?) and lost its event stream from localhost meanwhile' \
  "$WORK/stream.err" || fail "stream: no root cause naming the freeze: $(cat "$WORK/stream.err")"
grep -q 'root cause: lost host' "$WORK/stream.err" && fail "stream: blamed on a lost host"
expect_exit stream 1 ATTEMPT_CONTROLLER_FROZEN
wait_until 10 pid_gone "$rank" || fail "stream: the rank outlived dslaunch"
pass "frozen past the keep-alive window: exit 1, the freeze named, not a lost host"
