#!/usr/bin/env bash
# Note [Live job status]: `dslaunch status` and the controller's Prometheus
# endpoint, against real jobs.
#   - With no job running, `dslaunch status` says so and exits 1.
#   - A dsrank job (2 ranks) shows its state, each rank's host, pid, step,
#     heartbeat age, loss and tokens/s, the job's step of train.steps with
#     an ETA, and its last committed checkpoint; /metrics, scraped over HTTP
#     and parsed by Debian's python3-prometheus-client (an independent
#     reader), carries the same figures.
#   - With two jobs and no --job, a line per job; a controller elsewhere is
#     reached with --controller and the job's --token_file, and a wrong
#     token is refused.
#   - --watch follows a job until it ends; the status file goes with its
#     controller, and one left by a SIGKILLed controller is named and removed.
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?DSRANK must point at the dsrank binary}"
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" -c 'import prometheus_client' 2>/dev/null ||
  fail "$PY lacks prometheus_client (scripts/setup.sh installs python3-prometheus-client)"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg
export DSLAUNCH_RUN_DIR=$WORK/run

set +e
"$DSLAUNCH" status >"$WORK/none.out" 2>&1
code=$?
set -e
((code == 1)) || fail "status with no job exited $code: $(cat "$WORK/none.out")"
grep -q "no dslaunch job is running as this user on this machine" "$WORK/none.out" ||
  fail "status with no job said: $(cat "$WORK/none.out")"
pass "with no job running, dslaunch status says so and exits 1"

# A long dsrank job: it checkpoints every 2 steps and runs until stopped.
"$DSLAUNCH" --num_gpus 2 --job_id train1 --metrics_addr 127.0.0.1:0 --agent_metrics_addr 127.0.0.1:0 \
  --log_dir "$WORK/logs" --override "data.prepared=$WORK/data/fortunes" \
  --override train.steps=100000 --override checkpoint.interval=2 --override "checkpoint.dir=$WORK/ck" \
  --override ds_config.steps_per_print=1 "$CONFIG" --quiet_config >"$WORK/train1.out" 2>"$WORK/train1.err" &
TRAIN_PID=$!
CLEANUP_PIDS+=("$TRAIN_PID")

status_shows() {  # JOB PATTERN...: the job's table matches every PATTERN
  local job=$1 pattern
  shift
  "$DSLAUNCH" status --job "$job" >"$WORK/$job.status" 2>&1 || return 1
  for pattern in "$@"; do grep -qE -- "$pattern" "$WORK/$job.status" || return 1; done
}
wait_until 240 status_shows train1 "progress: step ([3-9]|[1-9][0-9]+)/100000" "last checkpoint: global_step" ||
  fail "the job's status never showed step 3 and a checkpoint: $(cat "$WORK/train1.status"; tail -3 "$WORK/train1.err")"
table=$(cat "$WORK/train1.status")
echo "$table"
grep -qE "^job train1: RUNNING, attempt 0, restarts 0 of 0, up [0-9]+:[0-9]{2}$" <<<"$table" || fail "job line"
grep -qE "steps/s, eta [0-9:]+; 2 of 2 rank\(s\) alive$" <<<"$table" || fail "no rate, ETA or ranks alive"
for rank in 0 1; do
  grep -qE "^$rank +[^ ]+ +$rank +running +[0-9]+ +[0-9]+ +[0-9.]+ s ago +[0-9]+\.[0-9]{4} +[0-9]+ +-$" <<<"$table" ||
    fail "rank $rank's row lacks its host, pid, step, heartbeat, loss or tokens/s"
done
pass "dslaunch status shows the dsrank job: state, step of total with an ETA, the checkpoint, and every rank's figures"

metrics_url=$(grep -o 'serving the job.s metrics at http://[0-9.:]*/metrics' "$WORK/train1.err" | awk '{print $NF}')
[[ -n $metrics_url ]] || fail "dslaunch did not say where its metrics are: $(head -5 "$WORK/train1.err")"
# scrape URL: checks on stdin run after this, with `one(name, **labels)`,
# the one sample of that name with those labels (python3-prometheus-client).
scrape() {
  "$PY" -c "$(cat <<'PY'
import sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
with urllib.request.urlopen(sys.argv[1], timeout=10) as response:
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain"), response.headers["Content-Type"]
    text = response.read().decode()
samples = {}
for family in text_string_to_metric_families(text):
    for sample in family.samples:
        samples.setdefault(sample.name, []).append((sample.labels, sample.value))
def one(name, **labels):
    found = [v for l, v in samples.get(name, []) if all(l.get(k) == v2 for k, v2 in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]
PY
)
$(cat)" "$1"
}
scrape "$metrics_url" <<'PY' || fail "the scraped metrics are wrong"
assert one("dslaunch_job_state", job_id="train1", state="RUNNING") == 1
assert one("dslaunch_job_state", job_id="train1", state="FAILED") == 0
assert one("dslaunch_job_world_size") == 2 and one("dslaunch_job_ranks_alive") == 2
assert one("dslaunch_job_restarts_total") == 0
assert one("dslaunch_job_step") >= 3 and one("dslaunch_job_total_steps") == 100000
assert one("dslaunch_job_steps_per_second") > 0 and one("dslaunch_job_eta_seconds") > 0
assert one("dslaunch_job_tokens_per_second") > 0 and 0 < one("dslaunch_job_loss") < 10
assert one("dslaunch_job_seconds_since_checkpoint") >= 0
for rank in ("0", "1"):
    assert one("dslaunch_rank_alive", rank=rank) == 1
    assert one("dslaunch_rank_step", rank=rank) >= 3
    assert 0 <= one("dslaunch_rank_heartbeat_age_seconds", rank=rank) < 60
    assert one("dslaunch_rank_tokens_per_second", rank=rank) > 0
print("scraped %d families, job step %d" % (len(samples), one("dslaunch_job_step")))
PY
pass "/metrics, parsed by python3-prometheus-client, carries the job's state, step, rate, ETA, loss, checkpoint age and each rank's figures"

# The agent's own /metrics (--agent_metrics_addr): its ranks, from its side.
agent_log=$(ls "$WORK"/logs/train1/agent_*.log | head -1)
agent_url=$(grep -o "serving this host's rank metrics at http://[0-9.:]*/metrics" "$agent_log" | awk '{print $NF}')
[[ -n $agent_url ]] || fail "the agent did not say where its metrics are: $(head -5 "$agent_log")"
scrape "$agent_url" <<'PY' || fail "the agent's scraped metrics are wrong"
assert one("dsagent_jobs") == 1
assert 0 <= one("dsagent_job_controller_silence_seconds", job_id="train1") < 10
assert one("dsagent_job_lease_seconds", job_id="train1") == 10
for rank in ("0", "1"):
    assert one("dsagent_rank_alive", job_id="train1", attempt="0", rank=rank) == 1
    assert one("dsagent_rank_step", job_id="train1", rank=rank) >= 3
    assert 0 < one("dsagent_rank_loss", job_id="train1", rank=rank) < 10
print("agent: scraped %d families" % len(samples))
PY
pass "an agent's /metrics, parsed by python3-prometheus-client, carries its job, lease and each rank's step and loss"

# A second job, of a program that sends no heartbeats, started with a token.
new_token "$WORK/token"
"$DSLAUNCH" --num_gpus 1 --job_id sleeper --token_file "$WORK/token" "$TEST_RANK" --sleep_ms 120000 \
  --until_file "$WORK/sleeper.done" >"$WORK/sleeper.out" 2>"$WORK/sleeper.err" &
SLEEPER_PID=$!
CLEANUP_PIDS+=("$SLEEPER_PID")
wait_until 60 status_shows sleeper "^0 .* running " || fail "the second job never ran: $(cat "$WORK/sleeper.status")"
"$DSLAUNCH" status >"$WORK/both.out" 2>&1 || fail "status of two jobs: $(cat "$WORK/both.out")"
grep -qE "^sleeper +RUNNING +no step yet +1/1 rank\(s\) alive$" "$WORK/both.out" || fail "no line for sleeper: $(cat "$WORK/both.out")"
grep -qE "^train1 +RUNNING +step [0-9]+/100000" "$WORK/both.out" || fail "no line for train1: $(cat "$WORK/both.out")"
pass "with two jobs, dslaunch status prints a line for each"

address=$(awk '$1 == "address" {print $2}' "$DSLAUNCH_RUN_DIR/sleeper.status")
[[ $(stat -c %a "$DSLAUNCH_RUN_DIR/sleeper.status") == 600 && $(stat -c %a "$DSLAUNCH_RUN_DIR") == 700 ]] ||
  fail "the status file or its folder can be read by others"
DSLAUNCH_RUN_DIR=$WORK/elsewhere "$DSLAUNCH" status --controller "$address" --token_file "$WORK/token" --job sleeper \
  >"$WORK/remote.out" 2>&1 || fail "status --controller: $(cat "$WORK/remote.out")"
grep -q "^job sleeper: RUNNING" "$WORK/remote.out" || fail "status --controller said: $(cat "$WORK/remote.out")"
new_token "$WORK/wrong"
set +e
"$DSLAUNCH" status --controller "$address" --token_file "$WORK/wrong" >"$WORK/wrong.out" 2>&1
code=$?
set -e
((code == 1)) && grep -q "missing or wrong token" "$WORK/wrong.out" ||
  fail "a wrong token was not refused (exit $code): $(cat "$WORK/wrong.out")"
pass "a controller is reached with --controller and the job's --token_file; a wrong token is refused"

"$DSLAUNCH" status --job sleeper --watch --interval_ms 100 >"$WORK/watch.out" 2>&1 &
WATCH_PID=$!
wait_until 30 grep -q "^job sleeper: RUNNING" "$WORK/watch.out" || fail "--watch showed nothing"
touch "$WORK/sleeper.done"
wait "$SLEEPER_PID" || fail "the second job failed: $(tail -3 "$WORK/sleeper.err")"
wait "$WATCH_PID" || fail "--watch did not end well with its job: $(tail -3 "$WORK/watch.out")"
grep -qE "job sleeper (has ended|: SUCCEEDED)|^job sleeper: SUCCEEDED" "$WORK/watch.out" ||
  fail "--watch did not say the job ended: $(tail -3 "$WORK/watch.out")"
[[ ! -e $DSLAUNCH_RUN_DIR/sleeper.status ]] || fail "the ended job's status file is still there"
pass "--watch follows a job to its end; its status file goes with its controller"

kill -KILL "$TRAIN_PID"
wait "$TRAIN_PID" 2>/dev/null || true
set +e
"$DSLAUNCH" status >"$WORK/stale.out" 2>&1
code=$?
set -e
((code == 1)) && grep -q "removed .*train1.status: its controller is gone" "$WORK/stale.out" ||
  fail "a SIGKILLed controller's file was not named stale (exit $code): $(cat "$WORK/stale.out")"
[[ ! -e $DSLAUNCH_RUN_DIR/train1.status ]] || fail "the stale status file is still there"
pass "a status file left by a SIGKILLed controller is named and removed"
