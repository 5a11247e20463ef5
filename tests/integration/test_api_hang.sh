#!/usr/bin/env bash
# A program built on the public C++ API (<dslaunch/runtime.h>) starts through
# the same rank bootstrap as dsrank (Note [One rank bootstrap]): it heartbeats
# its step and recent collectives to its agent. So when one of its ranks
# freezes (SIGSTOP), the controller names that rank within the heartbeat
# timeout, dumps every rank's stacks and flight record (the live rank waits
# inside a recorded all-reduce), and stops the job. Before the bootstrap was
# shared, such a job hung with no diagnosis at all.
source "$(dirname "$0")/lib.sh"
: "${TRAIN_CUSTOM_MODEL:?TRAIN_CUSTOM_MODEL must point at the example}"
EXAMPLE_CONFIG=$(cd "$(dirname "$0")/../../runtime/examples" && pwd)/ds_config.json

# The rank process of job $1 with RANK=$2 (by its environment).
rank_pid() {
  local proc
  for proc in /proc/[0-9]*; do
    if tr '\0' '\n' <"$proc/environ" 2>/dev/null | grep -qx "DSLAUNCH_JOB_ID=$1" &&
      tr '\0' '\n' <"$proc/environ" 2>/dev/null | grep -qx "RANK=$2" &&
      [[ $(readlink "$proc/exe" 2>/dev/null) == "$(readlink -f "$TRAIN_CUSTOM_MODEL")" ]]; then
      basename "$proc"
      return 0
    fi
  done
  return 1
}

"$DSLAUNCH" --num_gpus 2 --no_local_rank --job_id api-hang --log_dir "$WORK/logs" \
  --heartbeat_timeout_ms 2000 --hang_timeout_ms 4000 \
  "$TRAIN_CUSTOM_MODEL" "$EXAMPLE_CONFIG" 100000000 >"$WORK/api.out" 2>"$WORK/api.err" &
launcher=$!
CLEANUP_PIDS+=("$launcher")
wait_until 120 grep -q 'step=50 loss=' "$WORK/api.out" || fail "the API program never reached step 50"
frozen=$(rank_pid api-hang 1) || fail "no process of rank 1 found"
kill -STOP "$frozen"
CLEANUP_PIDS+=("$frozen")
stopped_at=$SECONDS
# The bound is generous (the heartbeat timeout is 2 s): without heartbeats
# the job would hang here for good, the failure this test exists to catch.
wait_until 60 pid_gone "$launcher" ||
  fail "dslaunch did not end the job within 60 s of rank 1 freezing: no diagnosis"
set +e
wait "$launcher"
code=$?
set -e
((code != 0)) || fail "dslaunch exited 0 although rank 1 was frozen"
echo "dslaunch exited $code $((SECONDS - stopped_at)) s after rank 1 was stopped"
grep -qE 'rank 1 on [^ ]+ sent no heartbeat for [0-9]+ ms while its process lives \(frozen or stopped\)' "$WORK/api.err" ||
  fail "the frozen rank was not named: $(grep -i 'attempt\|rank' "$WORK/api.err" | head -5)"
diagnosis=$(find "$WORK/logs" -path "*/attempt_0/diagnosis" -type d 2>/dev/null | head -1 || true)
[[ -n $diagnosis ]] || fail "no diagnosis folder under $WORK/logs: $(find "$WORK/logs" | head -20)"
[[ -s $diagnosis/rank_0.txt ]] || fail "no diagnosis of rank 0 in $diagnosis: $(ls "$diagnosis")"
grep -q 'all_reduce' "$diagnosis/rank_0.txt" ||
  fail "rank 0's diagnosis has no flight record of its all-reduces: $(head -c 800 "$diagnosis/rank_0.txt")"
grep -q 'NOT FINISHED' "$diagnosis/rank_0.txt" ||
  fail "rank 0's flight record does not show the collective it waits in: $(head -c 800 "$diagnosis/rank_0.txt")"
kill -CONT "$frozen" 2>/dev/null || true
wait_until 30 pid_gone "$frozen" || fail "the frozen rank $frozen is still there"
pass "a frozen rank of a C++ API program: named by its missing heartbeats, rank 0 seen waiting in its all-reduce"
