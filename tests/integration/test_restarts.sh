#!/usr/bin/env bash
# --max_restarts: a failed attempt is torn down and the whole job started
# again with the attempt number in the environment; the budget is job-wide.
source "$(dirname "$0")/lib.sh"

"$DSLAUNCH" --num_nodes 2 --num_gpus 2 --max_restarts 2 --log_dir "$WORK/logs" --job_id rs \
  "$TEST_RANK" --check_env --store --fail_rank 1 --fail_code 9 --fail_attempt 0 \
  >"$WORK/job.out" 2>"$WORK/job.err" || fail "job with one bad attempt exited $?"
grep -q 'restarting the job: attempt 1' "$WORK/job.err" || fail "no restart notice"
grep -q 'job rs succeeded after 2 attempt(s): attempt 0: rank error (rank 1 on node0 exited with code 9); attempt 1: succeeded' "$WORK/job.err" || fail "summary"
(($(grep -c 'ENV_OK .* attempt=1' "$WORK/job.out") == 4)) || fail "attempt 1 did not run 4 ranks"
[[ -f $WORK/logs/rs/attempt_0/rank_1.stderr.log && -f $WORK/logs/rs/attempt_1/rank_1.stdout.log ]] || fail "per-attempt log folders"
grep -q 'failing on purpose' "$WORK/logs/rs/attempt_0/rank_1.stderr.log" || fail "attempt 0 stderr log"
pass "restart after one failure"

set +e
"$DSLAUNCH" --num_gpus 2 --max_restarts 1 "$TEST_RANK" --fail_rank 0 --fail_code 4 >"$WORK/always.out" 2>"$WORK/always.err"
code=$?
set -e
((code == 4)) || fail "exhausted budget exit $code"
grep -q 'failed after 2 attempt(s)' "$WORK/always.err" || fail "exhausted summary"
(($(grep -c 'restarting the job' "$WORK/always.err") == 1)) || fail "restarted more than the budget"
pass "budget of 1 restart: 2 attempts, exit 4"
