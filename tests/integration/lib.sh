# Shared helpers for the integration tests. Each test is a bash script run by
# ctest with DSLAUNCH, DSAGENT, TEST_RANK and STORE_BARRIER set to the built
# programs. Waits are bounded polls on an observable condition, never fixed sleeps.
set -euo pipefail

: "${DSLAUNCH:?DSLAUNCH must point at the dslaunch binary}"
: "${DSAGENT:?DSAGENT must point at the dsagent binary}"
: "${TEST_RANK:?TEST_RANK must point at the test_rank binary}"

WORK=$(mktemp -d /tmp/dslaunch-it.XXXXXX)
CLEANUP_PIDS=()
cleanup_work() {
  local pid
  for pid in "${CLEANUP_PIDS[@]+"${CLEANUP_PIDS[@]}"}"; do
    { kill -9 "$pid" && wait "$pid"; } 2>/dev/null || true
  done
  rm -rf "$WORK"
}
EXTRA_CLEANUP=()  # commands run before the work folder goes (namespaces, ...)
cleanup_all() {
  local command
  cleanup_work
  for command in "${EXTRA_CLEANUP[@]+"${EXTRA_CLEANUP[@]}"}"; do eval "$command" || true; done
}
trap cleanup_all EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$WORK"/*.out "$WORK"/*.err "$WORK"/*.log; do
    [[ -f $f ]] && { echo "--- $f" >&2; tail -n 30 "$f" >&2; }
  done
  exit 1
}

pass() { echo "PASS: $*"; }

# wait_until SECONDS COMMAND...: polls COMMAND every 20 ms until it succeeds.
wait_until() {
  local bound=$1
  shift
  local deadline=$((SECONDS + bound))
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.02
  done
}

# True when the process is gone (or a zombie nobody reaped yet).
pid_gone() {
  local state
  [[ -r /proc/$1/stat ]] || return 0
  state=$(sed -E 's/.*\) (.).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 0
  [[ -z $state || $state == Z ]]
}

all_pids_gone() {
  local f
  for f in "$@"; do pid_gone "$(cat "$f")" || return 1; done
}

count_files() { local n; n=$(find "$1" -maxdepth 1 -name "$2" 2>/dev/null | wc -l); echo "$n"; }
files_at_least() { (($(count_files "$1" "$2") >= $3)); }

new_token() {
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$1"
  chmod 600 "$1"
}

# start_agent NAME LISTEN TOKEN_FILE [extra args]: starts a dsagent, sets
# AGENT_PID and AGENT_ADDR (host:port from its ready line).
start_agent() {
  local name=$1 listen=$2 token=$3
  shift 3
  local out="$WORK/agent_$name.ready"
  "$DSAGENT" --listen "$listen" --token_file "$token" --name "$name" "$@" >"$out" 2>"$WORK/agent_$name.log" &
  AGENT_PID=$!
  CLEANUP_PIDS+=("$AGENT_PID")
  wait_until 20 grep -q DSAGENT_READY "$out" || fail "agent $name did not start"
  AGENT_ADDR=$(awk '/DSAGENT_READY/ {print $2}' "$out")
}
