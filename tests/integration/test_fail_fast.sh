#!/usr/bin/env bash
# One rank fails mid-run: every other rank on every agent is gone within the
# design bound (1 s), dslaunch exits with the rank's code and names the cause.
source "$(dirname "$0")/lib.sh"

mkdir -p "$WORK/pids"
start=$SECONDS
set +e
"$DSLAUNCH" --num_nodes 2 --num_gpus 2 "$TEST_RANK" --pid_dir "$WORK/pids" --spawn_child \
  --sleep_ms 120000 --fail_rank 3 --fail_code 7 --fail_after_ms 1000 --stderr_lines 2 \
  >"$WORK/job.out" 2>"$WORK/job.err"
code=$?
set -e
((code == 7)) || fail "exit status $code, expected 7"
((SECONDS - start < 60)) || fail "took $((SECONDS - start)) s"
grep -q 'dslaunch: root cause: rank 3 on node1 exited with code 7; last stderr: .*rank 3 failing on purpose with 7' "$WORK/job.err" || fail "root cause line"
figure=$(sed -nE 's/.*fail-fast: 3 other rank\(s\) stopped ([0-9.]+) ms.*/\1/p' "$WORK/job.err")
[[ -n $figure ]] || fail "no fail-fast figure"
echo "fail-fast figure: every other rank gone ${figure} ms after rank 3 exited (bound 1000 ms)"
awk -v f="$figure" 'BEGIN { exit !(f < 1000) }' || fail "fail-fast took $figure ms"
all_pids_gone "$WORK"/pids/rank_*.pid || fail "a rank survived"
all_pids_gone "$WORK"/pids/child_*.pid || fail "a rank's child survived"
pass "fail-fast in $figure ms, exit 7, no survivors"

# A rank killed by a signal: 128+signal.
set +e
"$DSLAUNCH" --num_gpus 2 "$TEST_RANK" --sleep_ms 60000 --fail_rank 0 --fail_code $((128 + 9)) \
  >"$WORK/sig.out" 2>"$WORK/sig.err"
code=$?
set -e
((code == 137)) || fail "signal exit status $code, expected 137"
grep -q 'root cause: rank 0 on localhost was killed by signal 9 (SIGKILL)' "$WORK/sig.err" || fail "signal root cause"
pass "signalled rank gives 137"

# A program that does not exist: a startup failure naming it, 127.
set +e
"$DSLAUNCH" --num_gpus 2 no-such-program-xyz >"$WORK/missing.out" 2>"$WORK/missing.err"
code=$?
set -e
((code == 127)) || fail "missing program exit $code"
grep -q "no-such-program-xyz' not found in PATH" "$WORK/missing.err" || fail "missing program message"
pass "missing program is a clear startup failure"
