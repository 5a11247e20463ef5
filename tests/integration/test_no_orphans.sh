#!/usr/bin/env bash
# No rank outlives its agent (Note [Rank keeper] in agent/process_spawner.h):
# ranks that leave children behind, one in their process group and one in a
# session of its own (setsid), lose all of them when their agent is SIGKILLed,
# for a static agent (--agents) and for a local agent that dslaunch started.
# Before the keeper, every one of those children lived on with ppid 1.
source "$(dirname "$0")/lib.sh"

new_token "$WORK/token"

# The rank: like `sh -c 'sleep 300 & sleep 301'`, plus a grandchild in its own
# session. Every pid file is written whole (renamed into place).
cat >"$WORK/rank.sh" <<'EOF'
#!/bin/sh
d=$1
put() { echo "$2" >"$d/$1.tmp" && mv "$d/$1.tmp" "$d/$1"; }
put "rank_$RANK.pid" $$
sleep 300 &
put "group_child_$RANK.pid" $!
setsid sh -c 'echo $$ >"$0/session_child_$1.pid.tmp" && mv "$0/session_child_$1.pid.tmp" "$0/session_child_$1.pid"; exec sleep 302' "$d" "$RANK" &
sleep 301
EOF
chmod +x "$WORK/rank.sh"

session_of() { awk '{print $6}' "/proc/$1/stat"; }

# check_orphans_gone DIR AGENT_PID LABEL: SIGKILLs the agent once every
# descendant exists and waits (bounded) until none is left.
check_orphans_gone() {
  local dir=$1 agent=$2 label=$3 f pid rank_pid keepers
  wait_until 30 files_at_least "$dir" 'session_child_*.pid' 2 || fail "$label: the ranks did not start their children"
  wait_until 10 files_at_least "$dir" 'group_child_*.pid' 2 || fail "$label: no group children"
  for f in "$dir"/*.pid; do
    pid_gone "$(cat "$f")" && fail "$label: $(basename "$f") ended before the agent was killed"
  done
  # The setup means what it says: one child left the rank's session.
  for f in "$dir"/session_child_*.pid; do
    rank_pid=$(cat "$dir/rank_${f##*session_child_}")
    [[ $(session_of "$(cat "$f")") != $(session_of "$rank_pid") ]] ||
      fail "$label: $(basename "$f") did not get a session of its own"
  done
  keepers=$(pgrep -P "$agent" -d ' ' dsagent_keeper || true)
  local killed_at
  killed_at=$(date +%s%N)
  kill -9 "$agent"
  # Generous: the keepers act at once; a loaded 2-core machine may be slow.
  # shellcheck disable=SC2086
  wait_until 20 all_pids_gone "$dir"/*.pid || {
    for f in "$dir"/*.pid; do
      pid=$(cat "$f")
      pid_gone "$pid" || echo "left: $(basename "$f") pid $pid: $(cat "/proc/$pid/stat" 2>/dev/null)" >&2
    done
    fail "$label: a rank's descendant outlived the SIGKILLed agent"
  }
  for pid in $keepers; do pid_gone "$pid" || fail "$label: keeper $pid outlived the agent"; done
  echo "$label: every descendant gone $((($(date +%s%N) - killed_at) / 1000000)) ms after the agent's SIGKILL"
}

# 1. A static agent, SIGKILLed while a job runs on it.
start_agent a 127.0.0.1:0 "$WORK/token" --lease_ms 60000
mkdir -p "$WORK/static"
"$DSLAUNCH" --agents "$AGENT_ADDR" --token_file "$WORK/token" --num_gpus 2 --no_local_rank \
  "$WORK/rank.sh" "$WORK/static" >"$WORK/static.out" 2>"$WORK/static.err" &
CONTROLLER=$!
CLEANUP_PIDS+=("$CONTROLLER")
check_orphans_gone "$WORK/static" "$AGENT_PID" "static agent"
set +e
wait "$CONTROLLER"
code=$?
set -e
((code != 0)) || fail "static agent: the job of a killed agent exited 0"
pass "static agent SIGKILLed: its ranks' children (same group and setsid'd) are gone; dslaunch exit $code"

# 2. A local agent that dslaunch started, SIGKILLed the same way.
mkdir -p "$WORK/local"
"$DSLAUNCH" --token_file "$WORK/token" --num_gpus 2 --no_local_rank \
  "$WORK/rank.sh" "$WORK/local" >"$WORK/local.out" 2>"$WORK/local.err" &
CONTROLLER=$!
CLEANUP_PIDS+=("$CONTROLLER")
wait_until 30 files_at_least "$WORK/local" 'rank_*.pid' 2 || fail "local agent: the ranks did not start"
agent=$(pgrep -P "$CONTROLLER" dsagent || true)
[[ $agent =~ ^[0-9]+$ ]] || fail "local agent: dslaunch's agent not found ('$agent')"
check_orphans_gone "$WORK/local" "$agent" "local agent"
set +e
wait "$CONTROLLER"
code=$?
set -e
((code != 0)) || fail "local agent: the job of a killed agent exited 0"
pass "local agent SIGKILLed: its ranks' children (same group and setsid'd) are gone; dslaunch exit $code"
