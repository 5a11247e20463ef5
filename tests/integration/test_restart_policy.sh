#!/usr/bin/env bash
# The restart policy and the event log: a startup failure that repeats stops
# early; the backoff is waited out before the next attempt; events.jsonl is
# valid JSON with every state change and the recovery timing; a stop signal
# during a long backoff ends the job at once with 128+signal.
source "$(dirname "$0")/lib.sh"

# The brief's check: every line parses.
valid_jsonl() { python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$1"; }
now_ms() { date +%s%3N; }

# 1. A program that does not exist, with budget for 5 restarts: the second
# identical startup failure ends the job (whichever rank reported it first).
set +e
"$DSLAUNCH" --num_nodes 2 --num_gpus 2 --max_restarts 5 --restart_backoff_ms 50 --log_dir "$WORK/logs" \
  --job_id missing no-such-program-xyz >"$WORK/missing.out" 2>"$WORK/missing.err"
code=$?
set -e
((code == 127)) || fail "missing program exit $code, expected 127"
grep -q "not restarting: attempt 1 failed to start the same way as attempt 0 (program 'no-such-program-xyz' not found in PATH)" \
  "$WORK/missing.err" || fail "no early-stop notice"
grep -q 'job missing failed after 2 attempt(s): attempt 0: startup failure (.*); attempt 1: startup failure (.*); not restarting: ' \
  "$WORK/missing.err" || fail "summary of the early stop"
(($(grep -c 'restarting the job: attempt' "$WORK/missing.err") == 1)) || fail "restarted more than once"
events="$WORK/logs/missing/events.jsonl"
valid_jsonl "$events" || fail "events.jsonl of the missing program is not valid JSON lines"
grep -q '"event":"restart_decision", "attempt":1, "restart":false, .*"early_stop":true' "$events" ||
  fail "early stop not in the event log"
pass "missing program: 2 attempts of 6, early-stop notice, exit 127"

# 2. Backoff: attempt 1 starts no sooner than 300 ms after attempt 0 ended;
# the event log tells the whole story. Attempt 0's other ranks stay until
# they are stopped (--hold_attempt 0): with a fixed 1.5 s, a stop slower than
# 1.3 s on a loaded machine would have found them ended on their own.
"$DSLAUNCH" --num_nodes 2 --num_gpus 2 --max_restarts 2 --restart_backoff_ms 300 --log_dir "$WORK/logs" \
  --job_id backoff "$TEST_RANK" --sleep_ms 1500 --hold_attempt 0 --fail_after_ms 200 --fail_rank 1 --fail_code 9 --fail_attempt 0 \
  >"$WORK/backoff.out" 2>"$WORK/backoff.err" || fail "job with one bad attempt exited $?"
grep -q 'restarting the job: attempt 1 (restart 1 of 2) in 300 ms' "$WORK/backoff.err" || fail "no backoff notice"
grep -q 'recovery: attempt 1 started .* ms after the failure' "$WORK/backoff.err" || fail "no recovery notice"
events="$WORK/logs/backoff/events.jsonl"
valid_jsonl "$events" || fail "events.jsonl is not valid JSON lines"
python3 - "$events" <<'EOF' || fail "events.jsonl content"
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
def named(name, **match):
    return [e for e in events if e["event"] == name and all(e.get(k) == v for k, v in match.items())]
def check(condition, what):
    if not condition:
        sys.exit(f"events.jsonl: {what}")
assert all(isinstance(e["time_us"], int) for e in events)
check([e["time_us"] for e in events] == sorted(e["time_us"] for e in events), "times go backwards")
states = [e["state"] for e in named("state")]
check(states == ["JOB_PLANNING", "JOB_STARTING", "JOB_RUNNING", "JOB_STOPPING", "JOB_RESTARTING",
                 "JOB_STARTING", "JOB_RUNNING", "JOB_SUCCEEDED"], f"states {states}")
end0 = named("attempt_end", attempt=0)[0]
check(end0["end"] == "ATTEMPT_RANK_ERROR" and end0["exit_code"] == 9, f"attempt 0 end {end0}")
check(end0["cause"] == "rank 1 on node0 exited with code 9", f"cause {end0['cause']}")
check(end0["stopped_ranks"] == 3 and end0["teardown_us"] >= 0, f"teardown {end0}")
failed = named("rank_failed", attempt=0)
check(len(failed) == 1 and failed[0]["rank"] == 1 and failed[0]["exit_code"] == 9, f"rank_failed {failed}")
decision = named("restart_decision", attempt=0)[0]
check(decision["restart"] is True and decision["backoff_ms"] == 300, f"decision {decision}")
start1 = named("attempt_start", attempt=1)[0]
waited_us = start1["time_us"] - end0["time_us"]
check(waited_us >= 300_000, f"attempt 1 started {waited_us} us after attempt 0 ended")
recovery = named("recovery", attempt=1)[0]
check(recovery["failed_us"] == failed[0]["ended_us"], "recovery failure time is not the rank's end")
check(recovery["failed_us"] <= recovery["all_gone_us"] <= recovery["restarted_us"], f"order {recovery}")
check(recovery["restarted_us"] - recovery["all_gone_us"] >= 300_000, f"backoff not in recovery {recovery}")
check(named("job_end")[-1]["exit_code"] == 0, "job_end")
print(f"recovery: failure -> every rank gone {recovery['failure_to_gone_us'] / 1000:.1f} ms, "
      f"-> attempt 1 started {recovery['gone_to_restart_us'] / 1000:.1f} ms later "
      f"(attempt 1 began {waited_us / 1000:.1f} ms after attempt 0 ended)")
EOF
pass "backoff of 300 ms observed; events.jsonl valid with states and recovery timing"

# 3. Ctrl-C during a 20 s backoff: no new attempt, exit 130 at once.
"$DSLAUNCH" --num_gpus 2 --max_restarts 3 --restart_backoff_ms 20000 --log_dir "$WORK/logs" --job_id cc \
  "$TEST_RANK" --fail_rank 0 --fail_code 3 >"$WORK/cc.out" 2>"$WORK/cc.err" &
launcher=$!
CLEANUP_PIDS+=("$launcher")
events="$WORK/logs/cc/events.jsonl"
wait_until 30 grep -q '"event":"state", "state":"JOB_RESTARTING"' "$events" || fail "never reached the backoff"
signalled_at=$(now_ms)
kill -INT "$launcher"
set +e
wait "$launcher"
code=$?
set -e
took=$(($(now_ms) - signalled_at))
((code == 130)) || fail "SIGINT during the backoff: exit $code, expected 130"
((took < 3000)) || fail "SIGINT during the backoff took $took ms to end the job"
grep -q 'received SIGINT while waiting to restart; not starting attempt 1' "$WORK/cc.err" || fail "no cancel notice"
valid_jsonl "$events" || fail "events.jsonl after SIGINT is not valid JSON lines"
grep -q '"event":"signal", "attempt":0, "signal":2, "name":"SIGINT", "action":"cancel_restart"' "$events" ||
  fail "signal not in the event log"
! grep -q '"event":"attempt_start", "attempt":1' "$events" || fail "attempt 1 started after SIGINT"
tail -n 2 "$events" | grep -q '"state":"JOB_CANCELLED"' || fail "job did not end CANCELLED in the log"
pass "SIGINT during a 20 s backoff: exit 130 after $took ms, no new attempt"
