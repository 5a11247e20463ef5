#!/usr/bin/env bash
# Controller failover (Note [Controller failover], issue 22): gpt-tiny on two
# agents that outlive dslaunch (--agents), checkpointing. dslaunch is
# SIGKILLed mid-run; `dslaunch --resume_job LOG_DIR/JOB_ID` started within the
# agents' lease takes the job over: the ranks are never restarted (the same
# pids, no second attempt), they find the rendezvous store again at its
# address, and the job finishes with the losses of an uninterrupted run and
# exit 0. Then what --resume_job refuses: a job that is over, a job without
# a journal, other options beside it; and --journal without --agents.
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?DSRANK must point at the dsrank binary}"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg
new_token "$WORK/token"
start_agent a 127.0.0.1:0 "$WORK/token"
AGENT_A=$AGENT_ADDR
start_agent b 127.0.0.1:0 "$WORK/token"
AGENT_B=$AGENT_ADDR
STEPS=60
COMMON=(--agents "$AGENT_A,$AGENT_B" --token_file "$WORK/token" --num_gpus 1 --log_dir "$WORK/logs" --journal
  --lease_ms 30000 --override "data.prepared=$WORK/data/fortunes" --override train.eval_interval=0
  --override train.warmup_steps=4 --override "train.steps=$STEPS" --override train.global_batch_size=16
  --override train.micro_batch_size=8 --override checkpoint.interval=10 --override ds_config.zero_optimization.stage=2)

# 1. The uninterrupted run.
"$DSLAUNCH" "${COMMON[@]}" --job_id ref --override "checkpoint.dir=$WORK/ck_ref" "$CONFIG" \
  --loss_log "$WORK/ref.tsv" >"$WORK/ref.out" 2>"$WORK/ref.err" || fail "the uninterrupted run exited $?"
grep -q '^start' "$WORK/logs/ref/controller.journal" || fail "no journal for a job run with --journal"
[[ $(stat -c %a "$WORK/logs/ref/controller.journal") == 600 ]] || fail "the journal is readable by others"

# 2. The same job; its dslaunch is SIGKILLed after step 8.
"$DSLAUNCH" "${COMMON[@]}" --job_id fo --override "checkpoint.dir=$WORK/ck_fo" "$CONFIG" \
  --loss_log "$WORK/fo.tsv" >"$WORK/fo_first.out" 2>"$WORK/fo_first.err" &
FIRST=$!
CLEANUP_PIDS+=("$FIRST")
lines() { [[ -f $1 ]] && wc -l <"$1" || echo 0; }
wait_until 120 bash -c "(( \$( [[ -f '$WORK/fo.tsv' ]] && wc -l <'$WORK/fo.tsv' || echo 0) >= 8 ))" ||
  fail "the job did not reach step 8: $(tail -n 3 "$WORK/fo_first.err")"
kill -9 "$FIRST"
wait "$FIRST" 2>/dev/null || true
killed_at_step=$(lines "$WORK/fo.tsv")
((killed_at_step < STEPS)) || fail "the job had finished before its dslaunch was killed"
# The ranks the first dslaunch saw start (events.jsonl: rank_started).
pids_of() { grep '"event":"rank_started"' "$WORK/logs/fo/events.jsonl" | sed -E 's/.*"rank":([0-9]+), "pid":([0-9]+).*/\1 \2/' | sort -u; }
before=$(pids_of)
(($(wc -l <<<"$before") == 2)) || fail "expected 2 ranks started before the kill: $before"
while read -r _ pid; do pid_gone "$pid" && fail "rank pid $pid died with its dslaunch"; done <<<"$before"
echo "dslaunch killed at step $killed_at_step of $STEPS; ranks $(tr '\n' ' ' <<<"$before")still run"

# 3. A new dslaunch takes the job over and finishes it.
"$DSLAUNCH" --resume_job "$WORK/logs/fo" >"$WORK/fo.out" 2>"$WORK/fo.err" ||
  fail "the resumed job exited $?: $(tail -n 5 "$WORK/fo.err")"
grep -q 'taking over job fo at its attempt 0' "$WORK/fo.err" || fail "no takeover notice: $(head -n 3 "$WORK/fo.err")"
after=$(pids_of)
[[ $after == "$before" ]] || fail "the ranks are not the ones started before the kill: before [$before] after [$after]"
# Each start told twice: to the first dslaunch, and in the agents' replay to the second.
(($(grep -c '"event":"rank_started"' "$WORK/logs/fo/events.jsonl") == 4)) || fail "the agents did not replay the starts"
! grep -q '"event":"attempt_start", "attempt":1' "$WORK/logs/fo/events.jsonl" || fail "the job was restarted"
for agent in a b; do
  (($(grep -c 'job fo attempt 0: started' "$WORK/agent_$agent.log") == 1)) || fail "agent $agent started job fo's ranks again"
done
grep -q '"event":"attempt_attached", "attempt":0' "$WORK/logs/fo/events.jsonl" || fail "no attempt_attached event"
grep -q '"event":"job_end".*"JOB_SUCCEEDED"' "$WORK/logs/fo/events.jsonl" || fail "the job did not end as succeeded"
(($(lines "$WORK/fo.tsv") == STEPS)) || fail "the job stopped at step $(lines "$WORK/fo.tsv") of $STEPS"
same_losses ref fo "failover against uninterrupted"
[[ -d $WORK/ck_fo/global_step$STEPS ]] || fail "no final checkpoint after the takeover"
pass "dslaunch SIGKILLed at step $killed_at_step; --resume_job took the same ranks to the end with the same losses"

# 4. What --resume_job refuses, each naming why.
refused() {  # NAME EXPECTED_TEXT ARGS...
  local name=$1 text=$2 code=0
  shift 2
  "$DSLAUNCH" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || code=$?
  ((code != 0)) || fail "$name: exited 0"
  grep -qF -- "$text" "$WORK/$name.err" || fail "$name: no '$text' in: $(cat "$WORK/$name.err")"
}
refused over "job fo is over" --resume_job "$WORK/logs/fo"
refused no_journal "does not exist" --resume_job "$WORK/nowhere"
refused not_alone "--resume_job takes no other option" --resume_job "$WORK/logs/ref" --num_gpus 1
refused journal_local "--journal needs --agents" --journal --log_dir "$WORK/logs" --num_gpus 1 true
pass "refused: a job that is over, a folder without a journal, other options beside --resume_job, --journal without --agents"
