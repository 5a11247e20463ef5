#!/usr/bin/env bash
# The chaos suite: gpt-tiny on two "hosts" (two local agents, one rank each),
# with faults injected from outside at steps drawn from a fixed seed:
#   rank_kill    SIGKILL of rank 1
#   agent_kill   SIGKILL of host 1's agent (its rank dies with it); the job is
#                elastic (--num_nodes 1:2) and finishes on host 0 alone
#   rank_frozen  SIGSTOP of rank 1: its heartbeats stop while it lives
#   term_in_save SIGTERM to dslaunch while a checkpoint is being written (the
#                test build of dsrank holds rank 0 before the commit until the
#                test lets it go), then the job is run again
#   controller_frozen  SIGSTOP of dslaunch itself past its lease: the agents
#                stop the ranks; continued, dslaunch names its freeze (never
#                a success, never a lost host) and restarts
#   corrupt_resume  SIGTERM (a preemption), then 16 bytes of the newest
#                checkpoint overwritten before the job is run again
# For every scenario: the job finishes; no process of it remains; the final
# parameters equal the uninterrupted run's exactly when the world size is
# unchanged (and within 1e-4 when it changed); every committed checkpoint
# consolidates; the detect, stop and first-step-after-resume times are
# printed from events.jsonl and held to the design bounds (others stopped
# within 3 s of a dead rank; first step after resume within 60 s: generous design bounds for a loaded machine; the measured times are printed).
# Link cuts, a host lost with MIN:MAX and the host coming back run across
# network namespaces in test_netns_elastic.sh.
source "$(dirname "$0")/lib.sh"
: "${DSCONSOLIDATE:?DSCONSOLIDATE must point at the dsconsolidate binary}"
: "${DSRANK_FAULT_INJECTION:?DSRANK_FAULT_INJECTION must point at the dsrank_fault_injection binary}"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg
RANDOM=20261129  # the injection steps are drawn from this seed
new_token "$WORK/token"

COMMON=(--num_nodes 2 --num_gpus 1 --token_file "$WORK/token" --log_dir "$WORK/logs"
  --max_restarts 2 --restart_backoff_ms 0 --hang_timeout_ms 4000 --heartbeat_timeout_ms 2000
  --override "data.prepared=$WORK/data/fortunes" --override train.eval_interval=0
  --override train.warmup_steps=4 --override train.steps=40 --override train.global_batch_size=16
  --override train.micro_batch_size=8 --override checkpoint.interval=4 --override ds_config.zero_optimization.stage=2)

run_job() {  # JOB_ID [extra dslaunch args...] -- [dsrank args]: runs in the background, sets JOB_PID
  local job=$1
  shift
  "$DSLAUNCH" "${COMMON[@]}" --job_id "$job" --override "checkpoint.dir=$WORK/ck_$job" "$@" \
    >"$WORK/$job.out" 2>"$WORK/$job.err" &
  JOB_PID=$!
  CLEANUP_PIDS+=("$JOB_PID")
}

finish() {  # JOB_ID EXPECTED_EXIT: waits for the job
  local code=0
  wait "$JOB_PID" || code=$?
  ((code == $2)) || fail "$1 exited $code, expected $2: $(tail -n 3 "$WORK/$1.err")"
}

steps_logged() { [[ -f $1 ]] && wc -l <"$1" || echo 0; }
wait_step() {  # LOSS_LOG STEP
  wait_until 120 bash -c "(( \$( [[ -f '$1' ]] && wc -l <'$1' || echo 0) >= $2 ))" || fail "training did not reach step $2"
}

# The pid of RANK of job JOB (from the environment the agent gave it).
rank_pid() {
  local proc
  for proc in /proc/[0-9]*; do
    if tr '\0' '\n' <"$proc/environ" 2>/dev/null | grep -qx "DSLAUNCH_JOB_ID=$1" &&
      tr '\0' '\n' <"$proc/environ" 2>/dev/null | grep -qx "RANK=$2"; then
      basename "$proc"
      return 0
    fi
  done
  return 1
}

# Nothing of job JOB may remain: no rank (by its environment), no agent of
# this suite (by the token file in its command line) once every job is over.
no_rank_left() {
  local proc
  for proc in /proc/[0-9]*; do
    tr '\0' '\n' <"$proc/environ" 2>/dev/null | grep -qx "DSLAUNCH_JOB_ID=$1" && return 1
  done
  return 0
}
# ("[d]sagent": the pattern must not match the shell that runs pgrep.)
no_agent_left() { ! pgrep -f "[d]sagent .*--token_file $WORK/token" >/dev/null; }
check_nothing_left() {
  wait_until 10 no_rank_left "$1" || fail "$1: a rank process outlived the job"
  wait_until 10 no_agent_left || fail "$1: an agent outlived the job: $(pgrep -af "[d]sagent .*$WORK/token")"
}

# Every committed checkpoint of JOB consolidates; the last one becomes JOB.safetensors.
check_checkpoints() {
  local tag count=0
  for tag in $(ls "$WORK/ck_$1" | grep -E '^global_step[0-9]+$' || true); do
    "$DSCONSOLIDATE" "$WORK/ck_$1" --tag "$tag" --output "$WORK/$1.$tag.safetensors" >/dev/null 2>"$WORK/$1.consolidate.err" ||
      fail "$1: committed checkpoint $tag does not load: $(cat "$WORK/$1.consolidate.err")"
    count=$((count + 1))
  done
  ((count > 0)) || fail "$1: no committed checkpoint"
  [[ -f $WORK/$1.global_step40.safetensors ]] || fail "$1: no final checkpoint at step 40"
  cp "$WORK/$1.global_step40.safetensors" "$WORK/$1.safetensors"
}

# JOB's final parameters against the reference: identical, or within TOLERANCE.
compare_parameters() {
  if [[ $2 == exact ]]; then
    cmp -s "$WORK/ref.safetensors" "$WORK/$1.safetensors" || fail "$1: final parameters differ from the uninterrupted run"
    echo "  final parameters: bit-identical to the uninterrupted run"
    return
  fi
  python3 - "$WORK/ref.safetensors" "$WORK/$1.safetensors" "$2" <<'EOF' || fail "$1: final parameters differ beyond $2"
import json, struct, sys
def load(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    values = data[8 + n:]
    return struct.unpack("<%df" % (len(values) // 4), values)
a, b = load(sys.argv[1]), load(sys.argv[2])
assert len(a) == len(b), "different sizes"
worst = max(abs(x - y) for x, y in zip(a, b))
print("  final parameters: worst absolute difference %.2e (world size changed)" % worst)
sys.exit(0 if worst <= float(sys.argv[3]) else 1)
EOF
}

# Detect / stop / first step after resume, from the job's event log.
report_times() {
  python3 - "$WORK/logs/$1/events.jsonl" "$2" <<'EOF' || fail "$1: recovery times out of bounds"
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
bound_stop_us = int(sys.argv[2])
recovery = [e for e in events if e["event"] == "recovery"]
first = [e for e in events if e["event"] == "first_step"]
assert recovery, "no recovery event"
assert first, "no first_step event"
r, f = recovery[0], first[0]
print("  failure -> every rank gone %.0f ms; -> restarted %.0f ms; -> first step after resume %.0f ms"
      % (r["failure_to_gone_us"] / 1e3, r["failure_to_restart_us"] / 1e3, f["failure_to_first_step_us"] / 1e3))
# Design bounds, generous for a loaded 2-core machine (the flake hunt saw a
# first step 10.04 s after the failure with two busy loops beside the tests).
ok = f["failure_to_first_step_us"] < 60e6 and (bound_stop_us <= 0 or r["failure_to_gone_us"] < bound_stop_us)
sys.exit(0 if ok else 1)
EOF
}

# The uninterrupted run.
run_job ref "$CONFIG" --loss_log "$WORK/ref.tsv"
finish ref 0
check_nothing_left ref
check_checkpoints ref
echo "reference: 40 steps uninterrupted"

# 1. SIGKILL of rank 1.
step=$((6 + RANDOM % 24))
run_job rank_kill "$CONFIG" --loss_log "$WORK/rank_kill.tsv"
wait_step "$WORK/rank_kill.tsv" "$step"
victim=$(rank_pid rank_kill 1) || fail "rank_kill: no process of rank 1 found"
kill -9 "$victim"
finish rank_kill 0
grep -q 'rank 1 on .* was killed by signal 9 (SIGKILL)' "$WORK/rank_kill.err" || fail "rank_kill: no cause"
echo "rank_kill: rank 1 killed at step $step"
check_nothing_left rank_kill
check_checkpoints rank_kill
compare_parameters rank_kill exact
report_times rank_kill 3000000
pass "SIGKILL of a rank at step $step: others stopped within 3 s, resumed, identical parameters"

# 2. SIGKILL of host 1's agent: the host is lost; the elastic job goes on alone.
step=$((6 + RANDOM % 24))
run_job agent_kill --num_nodes 1:2 "$CONFIG" --loss_log "$WORK/agent_kill.tsv"
wait_step "$WORK/agent_kill.tsv" "$step"
agent=$(pgrep -f "[d]sagent .*--token_file $WORK/token --name node1") || fail "agent_kill: host node1's agent not found"
kill -9 "$agent"
finish agent_kill 0
grep -q 'lost host' "$WORK/agent_kill.err" || fail "agent_kill: no lost-host cause: $(grep attempt "$WORK/agent_kill.err" | head -3)"
grep -q 'world size 2 -> 1' "$WORK/agent_kill.err" || fail "agent_kill: no shrink"
echo "agent_kill: host 1's agent killed at step $step"
check_nothing_left agent_kill
check_checkpoints agent_kill
compare_parameters agent_kill 1e-4
report_times agent_kill 0
pass "SIGKILL of an agent at step $step: host lost, continued on one host, parameters within 1e-4"

# 3. Rank 1 frozen (SIGSTOP): alive but silent; its agent reports the missed heartbeats.
step=$((6 + RANDOM % 24))
run_job rank_frozen "$CONFIG" --loss_log "$WORK/rank_frozen.tsv"
wait_step "$WORK/rank_frozen.tsv" "$step"
frozen=$(rank_pid rank_frozen 1) || fail "rank_frozen: no process of rank 1 found"
kill -STOP "$frozen"
finish rank_frozen 0
grep -qE 'rank 1 on [^ ]+ sent no heartbeat for [0-9]+ ms while its process lives' "$WORK/rank_frozen.err" ||
  fail "rank_frozen: no missed-heartbeat cause: $(grep attempt "$WORK/rank_frozen.err" | head -3)"
echo "rank_frozen: rank 1 stopped at step $step"
check_nothing_left rank_frozen
check_checkpoints rank_frozen
compare_parameters rank_frozen exact
report_times rank_frozen 0
pass "a frozen rank at step $step: found by its missing heartbeats, resumed, identical parameters"

# 4. SIGTERM to dslaunch while a checkpoint is being written: the save
#    completes, the ranks checkpoint and stop, dslaunch exits 143; the job is
#    run again and resumes from the last committed checkpoint.
#    Note [Holding a save from a test]: dslaunch runs the dsrank beside it, so
#    a copy of dslaunch sits beside the test build of dsrank, which holds rank
#    0 just before it commits the chosen checkpoint until the test writes to
#    a FIFO: the SIGTERM lands inside the save whatever the machine's load.
step=$((2 + RANDOM % 4))
save_dir="$WORK/ck_term_in_save"
faulty_bin="$WORK/faulty_bin"
mkdir -p "$faulty_bin"
cp "$DSLAUNCH" "$faulty_bin/dslaunch"
ln -s "$DSRANK_FAULT_INJECTION" "$faulty_bin/dsrank"
ln -s "$DSAGENT" "$faulty_bin/dsagent"
hold="$WORK/term_in_save.hold"
mkfifo "$hold"
DSLAUNCH="$faulty_bin/dslaunch" DSRANK_FAULT_HOLD_COMMIT="$hold" \
  DSRANK_FAULT_HOLD_COMMIT_OF="$save_dir/global_step$((step * 8))" \
  run_job term_in_save --override checkpoint.interval=8 "$CONFIG" --loss_log "$WORK/term_in_save.tsv"
wait_until 120 test -e "$hold.held" || fail "term_in_save: the save of step $((step * 8)) was never held before its commit"
[[ -d "$save_dir/.global_step$((step * 8)).partial" ]] || fail "term_in_save: held, but no partial folder of step $((step * 8))"
kill -TERM "$JOB_PID"
wait_until 30 grep -q 'asking every rank to save a checkpoint and stop' "$WORK/term_in_save.err" ||
  fail "term_in_save: dslaunch did not take the SIGTERM: $(tail -n 3 "$WORK/term_in_save.err")"
timeout 60 bash -c 'echo release >"$1"' _ "$hold" || fail "term_in_save: rank 0 no longer waited to commit"
finish term_in_save 143
[[ -z $(find "$save_dir" -maxdepth 1 -name '*partial*') ]] || fail "term_in_save: a partial checkpoint was left: $(ls -A "$save_dir")"
check_nothing_left term_in_save
run_job term_in_save --override checkpoint.interval=8 "$CONFIG" --loss_log "$WORK/term_in_save.tsv"
finish term_in_save 0
grep -q "resumed from $save_dir/global_step" "$WORK/term_in_save.out" || fail "term_in_save: the second run did not resume"
echo "term_in_save: SIGTERM during the save of step $((step * 8))"
check_nothing_left term_in_save
check_checkpoints term_in_save
compare_parameters term_in_save exact
pass "SIGTERM during the checkpoint of step $((step * 8)): no partial left, resumed, identical parameters"

# 5. dslaunch itself frozen (SIGSTOP) past its 2 s lease: the agents stop
#    both ranks; continued, dslaunch names its own freeze as the cause (it
#    used to report the attempt as succeeded and exit 0), restarts, and the
#    job resumes from its last committed checkpoint.
step=$((6 + RANDOM % 24))
run_job controller_frozen --lease_ms 2000 "$CONFIG" --loss_log "$WORK/controller_frozen.tsv"
wait_step "$WORK/controller_frozen.tsv" "$step"
ranks=()
for r in 0 1; do ranks+=("$(rank_pid controller_frozen $r)") || fail "controller_frozen: no process of rank $r found"; done
kill -STOP "$JOB_PID"
both_gone() { pid_gone "${ranks[0]}" && pid_gone "${ranks[1]}"; }
wait_until 60 both_gone || { kill -CONT "$JOB_PID"; fail "controller_frozen: the agents did not stop the ranks"; }
kill -CONT "$JOB_PID"
finish controller_frozen 0
# Whichever news came first once it ran again: a rank its agent stopped, or a broken stream.
grep -qE "attempt 0: dslaunch was frozen for [0-9]+ ms \(SIGSTOP\?\) and (the agents' leases \(2000 ms\) expired|lost its event stream)" \
  "$WORK/controller_frozen.err" ||
  fail "controller_frozen: no cause naming the freeze: $(grep attempt "$WORK/controller_frozen.err" | head -3)"
grep -q 'attempt 0: controller frozen' "$WORK/controller_frozen.err" || fail "controller_frozen: attempt 0's class"
echo "controller_frozen: dslaunch stopped at step $step"
check_nothing_left controller_frozen
check_checkpoints controller_frozen
compare_parameters controller_frozen exact
report_times controller_frozen 0
pass "dslaunch frozen at step $step: its freeze named, restarted, resumed, identical parameters"

# 6. A preempted job whose newest checkpoint is then corrupted (16 bytes of
#    rank 1's file overwritten, as a bad disk or a careless copy would): the
#    next run names it, skips it, resumes from the one before, and ends with
#    the uninterrupted run's parameters (issue 13: it used to load it and
#    train on NaN).
step=$((6 + RANDOM % 24))
corrupt_dir="$WORK/ck_corrupt_resume"
run_job corrupt_resume "$CONFIG" --loss_log "$WORK/corrupt_resume.tsv"
wait_step "$WORK/corrupt_resume.tsv" "$step"
kill -TERM "$JOB_PID"
finish corrupt_resume 143
check_nothing_left corrupt_resume
newest=$(cat "$corrupt_dir/latest") || fail "corrupt_resume: no latest after the preemption"
victim="$corrupt_dir/$newest/rank_1.pt"
printf 'XXXXXXXXXXXXXXXX' | dd of="$victim" bs=1 seek=$(($(stat -c %s "$victim") / 2)) conv=notrunc status=none
run_job corrupt_resume "$CONFIG" --loss_log "$WORK/corrupt_resume.tsv"
finish corrupt_resume 0
grep -q "checkpoint skipped: $corrupt_dir/$newest: rank_1.pt does not match its checksum" "$WORK/corrupt_resume.out" ||
  fail "corrupt_resume: the corrupted $newest was not named"
grep -q "resumed from $corrupt_dir/global_step" "$WORK/corrupt_resume.out" || fail "corrupt_resume: did not resume"
echo "corrupt_resume: preempted after step $step; $newest corrupted; $(grep -o 'resumed from [^ ]*' "$WORK/corrupt_resume.out" | tail -n 1)"
check_nothing_left corrupt_resume
check_checkpoints corrupt_resume
compare_parameters corrupt_resume exact
pass "a corrupted newest checkpoint after a preemption at step $step: named, skipped, resumed from the one before, identical parameters"
