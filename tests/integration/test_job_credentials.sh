#!/usr/bin/env bash
# Note [Per-job credentials] (common/rpc_auth_policy.h), issue 22: a rank of
# one job that reads every token it can find still cannot stop, watch,
# diagnose, keep alive or add ranks to another job on the same agent.
#  1. One agent started as in a static deployment (--token_file on its
#     command line); two jobs on it through --agents: "victim" and
#     "intruder". Both controllers keep a job status file in the run folder.
#  2. The intruder's rank collects every 64-hex-digit string from every
#     process's command line and environment, every file a --token_file on any
#     command line names, and every file under the test's folder (the token
#     file, both jobs' logs and status files). The agent token, the victim
#     rank's own tokens and the victim's controller token are among them.
#  3. It tries them all on the victim's job (tests/programs/agent_intruder.cc):
#     every call about the job is refused, and the intruder job exits 0.
#  4. The victim's rank runs on; the victim then exits 0 with no rank
#     stopped. Before the per-job credential, the agent token alone stopped
#     it (StopJob) or took its event stream (Watch).
source "$(dirname "$0")/lib.sh"
: "${AGENT_INTRUDER:?AGENT_INTRUDER must point at the agent_intruder binary}"
export DSLAUNCH_RUN_DIR=$WORK/run

new_token "$WORK/token"
start_agent a 127.0.0.1:0 "$WORK/token"
mkdir -p "$WORK/pids"
"$DSLAUNCH" --agents "$AGENT_ADDR" --token_file "$WORK/token" --num_gpus 1 --job_id victim --log_dir "$WORK/logs" \
  "$TEST_RANK" --pid_dir "$WORK/pids" --sleep_ms 240000 --until_file "$WORK/victim.done" \
  >"$WORK/victim.out" 2>"$WORK/victim.err" &
victim=$!
CLEANUP_PIDS+=("$victim")
wait_until 30 files_at_least "$WORK/pids" 'rank_0.pid' 1 || fail "the victim's rank did not start"
victim_rank=$(cat "$WORK/pids/rank_0.pid")
wait_until 30 files_at_least "$WORK/run" 'victim.status' 1 || fail "the victim's status file did not appear"

cat >"$WORK/intruder.sh" <<'SCRIPT'
#!/usr/bin/env bash
# The intruder's rank: every token it can read, then every call on the victim.
set -u
work=$1 agent=$2
{
  for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do tr '\0' '\n' <"$f" 2>/dev/null; done
  for f in /proc/[0-9]*/cmdline; do
    tr '\0' '\n' <"$f" 2>/dev/null | grep -A1 -x -- '--token_file' | grep -v -x -e '--token_file' -e '--'
  done | sort -u | while read -r path; do [[ -r $path ]] && cat "$path"; done
  grep -rh . "$work" 2>/dev/null
} | grep -oE '[0-9a-f]{64}' | sort -u >"$work/candidates"
exec "$AGENT_INTRUDER" "$agent" "$work/candidates" victim
SCRIPT
set +e
"$DSLAUNCH" --agents "$AGENT_ADDR" --token_file "$WORK/token" --num_gpus 1 --job_id intruder --log_dir "$WORK/logs" --no_local_rank \
  bash "$WORK/intruder.sh" "$WORK" "$AGENT_ADDR" >"$WORK/intruder.out" 2>"$WORK/intruder.err"
code=$?
set -e
cat "$WORK/intruder.out"
((code == 0)) || fail "the intruder exited $code (an accepted call, or it could not run): $(cat "$WORK/intruder.err")"
# It had what an intruder could want: the agent token, the victim rank's own
# tokens and the controllers' tokens from their status files.
grep -qx "$(cat "$WORK/token")" "$WORK/candidates" || fail "the intruder did not find the agent token"
for variable in DSLAUNCH_RANK_TOKEN DSLAUNCH_STORE_TOKEN; do
  value=$(tr '\0' '\n' <"/proc/$victim_rank/environ" | sed -n "s/^$variable=//p")
  [[ -n $value ]] || fail "the victim's rank has no $variable"
  grep -qx "$value" "$WORK/candidates" || fail "the intruder did not find the victim's $variable"
done
controller_token=$(sed -n 's/^token //p' "$WORK/run/victim.status")
[[ -n $controller_token ]] || fail "no controller token in the victim's status file: $(cat "$WORK/run/victim.status")"
grep -qx "$controller_token" "$WORK/candidates" || fail "the intruder did not find the victim's controller token"
grep -q '1 of [0-9]* candidate(s) open Describe' "$WORK/intruder.out" || fail "the agent token did not open Describe"
grep -q 'calls about job victim: [1-9][0-9]* refused, 0 accepted' "$WORK/intruder.out" || fail "no refusals counted"
grep -q 'StopJob 7: dsagent: job victim belongs to another controller' "$WORK/intruder.out" ||
  fail "StopJob with the agent token was not refused as another controller's job"
pass "$(grep -c . "$WORK/candidates") tokens read by another job's rank, agent token among them: every call about the victim refused"

pid_gone "$victim_rank" && fail "the victim's rank is gone"
touch "$WORK/victim.done"
set +e
wait "$victim"
code=$?
set -e
((code == 0)) || fail "the victim exited $code: $(cat "$WORK/victim.err")"
grep -q '"event":"rank_stopped"' "$WORK/logs/victim/events.jsonl" && fail "a rank of the victim was stopped"
pass "the victim ran on and exited 0"
