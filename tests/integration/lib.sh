# Shared helpers for the integration tests. Each test is a bash script run by
# ctest with DSLAUNCH, DSAGENT, TEST_RANK and STORE_BARRIER set to the built
# programs. Waits are bounded polls on an observable condition, never fixed sleeps.
#
# Note [No silent exits]: every way a test ends says why. A check that fails
# calls `fail "what was expected"`. Anything else that fails under `set -e`
# (a grep that finds nothing in `x=$(grep ... | ...)`, `((n++))` with n = 0,
# a `wait` on a rank that failed, a `[[ ]] && ...` that ends a function)
# used to end the script with no word; the ERR trap below names the file,
# line, command and the functions it was called from, then prints the same
# log tails as fail. `set -E` hands the trap to functions, command
# substitutions and subshells. It acts only where `set -e` would end the
# script: not between `set +e` and `set -e`, not in conditions, and not in a
# `$(...)` (bash runs those without -e). Inside a `( ... )` subshell it only
# ends the subshell; the caller sees the failed `( ... )` or `$(...)` and
# reports it once, with the whole command. Where no match is a possible
# outcome, write `x=$(grep ... || true)` and check x, or `|| fail "..."`.
set -eEuo pipefail

: "${DSLAUNCH:?DSLAUNCH must point at the dslaunch binary}"
: "${DSAGENT:?DSAGENT must point at the dsagent binary}"
: "${TEST_RANK:?TEST_RANK must point at the test_rank binary}"

WORK=$(mktemp -d /tmp/dslaunch-it.XXXXXX)
CLEANUP_PIDS=()
cleanup_work() {
  [[ -n ${KEEP_WORK:-} ]] && { echo "kept $WORK" >&2; return; }
  local pid
  for pid in "${CLEANUP_PIDS[@]+"${CLEANUP_PIDS[@]}"}"; do
    { kill -9 "$pid" && wait "$pid"; } 2>/dev/null || true
  done
  rm -rf "$WORK"
}
EXTRA_CLEANUP=()  # commands run after the work folder goes (namespaces, ...)
# The EXIT trap: every step runs whatever the one before did, and none of them
# changes the test's exit status (a failed cleanup is reported, not fatal).
cleanup_all() {
  trap - ERR
  set +e
  local command
  cleanup_work
  for command in "${EXTRA_CLEANUP[@]+"${EXTRA_CLEANUP[@]}"}"; do
    eval "$command" || echo "cleanup: '$command' exited $?" >&2
  done
}
trap cleanup_all EXIT

# print_log_tails: the end of every log the test wrote, for the CI output.
print_log_tails() {
  local f
  for f in "$WORK"/*.out "$WORK"/*.err "$WORK"/*.log; do
    if [[ -f $f ]]; then
      echo "--- $f" >&2
      tail -n 30 "$f" >&2
    fi
  done
}

fail() {
  echo "FAIL: ${0##*/}: $*" >&2
  print_log_tails
  exit 1
}

# Note [No silent exits]: the ERR trap. CODE LINE COMMAND are $?, $LINENO and
# $BASH_COMMAND where the command failed.
on_unexpected_error() {
  local code=$1 line=$2 command=$3
  # Between `set +e` and `set -e` a test reads the status itself. ($? after
  # the trap is still the command's.)
  [[ $- == *e* ]] || return 0
  # In a subshell: end it; the caller reports the failed $(...) or ( ... ).
  ((BASH_SUBSHELL == 0)) || exit "$code"
  trap - ERR
  local i
  echo "FAIL: ${0##*/}: unexpected exit status $code of '$command' at ${BASH_SOURCE[1]##*/}:$line" >&2
  for ((i = 1; i < ${#FUNCNAME[@]} - 1; i++)); do
    echo "  in ${FUNCNAME[i]}(), called from ${BASH_SOURCE[i + 1]##*/}:${BASH_LINENO[i]}" >&2
  done
  print_log_tails
  exit "$code"
}
trap 'on_unexpected_error $? $LINENO "$BASH_COMMAND"' ERR

pass() { echo "PASS: $*"; }

# The job tests' two steps (test_llama_*.sh): run_job runs the job file
# $CONFIG on WORLD ranks with the test's COMMON overrides and more
# arguments, its losses in $WORK/NAME.tsv and its output in NAME.out and
# NAME.err; same_losses compares two runs' losses step by step (relative
# 1e-4) and prints the worst difference.
run_job() {  # NAME WORLD [dslaunch arguments...]
  local name=$1 world=$2
  shift 2
  "$DSLAUNCH" --num_gpus "$world" "${COMMON[@]+"${COMMON[@]}"}" "$@" "$CONFIG" --loss_log "$WORK/$name.tsv" \
    >"$WORK/$name.out" 2>"$WORK/$name.err" || fail "$name exited $?: $(grep -m2 -i error "$WORK/$name.out" "$WORK/$name.err")"
}
same_losses() {  # A B LABEL
  paste "$WORK/$1.tsv" "$WORK/$2.tsv" | awk -v label="$3" '
    { d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r; if (r > 1e-4) bad = 1 }
    END { printf "%s: worst relative loss difference %.2e over %d steps\n", label, worst, NR; exit bad || NR == 0 }' ||
    fail "$3: losses differ"
}

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
  # Not a pid (an empty file would make this /proc//stat, which exists).
  [[ $1 =~ ^[0-9]+$ ]] || { echo "pid_gone: '$1' is not a pid" >&2; return 1; }
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

# reap_stale_networks: removes the namespaces and bridge of a test whose
# process is gone (killed by a timeout, so its EXIT trap never ran).
reap_stale_networks() {
  local ns owner
  for ns in $(ip netns list | awk '{print $1}' | grep -E '^dslns[0-9]+[ab]$' || true); do
    owner=${ns#dslns}
    owner=${owner%[ab]}
    [[ -d /proc/$owner ]] && continue
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    ip link del "dslbr$owner" 2>/dev/null || true
  done
  local bridge_name
  for bridge_name in $(ip -o link show type bridge | awk -F': ' '{print $2}' | grep -E '^dslbr[0-9]+$' || true); do
    [[ -d /proc/${bridge_name#dslbr} ]] || ip link del "$bridge_name" 2>/dev/null || true
  done
}

# setup_two_host_network: two network namespaces on a bridge play two hosts
# (root and iproute2 needed; a test that calls this fails, never skips,
# without them). Sets NS_A NS_B ADDR_A ADDR_B CONTROLLER_ADDR and removes
# everything when the test exits.
setup_two_host_network() {
  [[ $(id -u) -eq 0 ]] || fail "this test creates network namespaces and must run as root"
  command -v ip >/dev/null || fail "iproute2 (ip) is not installed"

  reap_stale_networks
  tag=$$
  # A /24 that no interface or route here uses yet: a stale or foreign route
  # to the same subnet would swallow the controller's packets.
  local third=$((tag % 250 + 1)) tries
  for ((tries = 0; tries < 250; tries++)); do
    [[ -z $(ip -4 route show "10.213.$third.0/24") && -z $(ip -4 addr show to "10.213.$third.0/24") ]] && break
    third=$((third % 250 + 1))
  done
  ((tries < 250)) || fail "no free 10.213.x.0/24 subnet for the test network"
  subnet="10.213.$third"
  bridge="dslbr$tag"
  NS_A="dslns${tag}a"
  NS_B="dslns${tag}b"
  ADDR_A="$subnet.2"
  ADDR_B="$subnet.3"
  CONTROLLER_ADDR="$subnet.1"

  remove_network() {
    local ns
    for ns in "$NS_A" "$NS_B"; do
      ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
      ip netns del "$ns" 2>/dev/null || true
    done
    ip link del "$bridge" 2>/dev/null || true
  }
  EXTRA_CLEANUP+=(remove_network)

  ip link add "$bridge" type bridge || fail "cannot create a bridge (root and iproute2 needed)"
  ip addr add "$CONTROLLER_ADDR/24" dev "$bridge"
  ip link set "$bridge" up
  for side in a b; do
    ns="dslns${tag}$side"
    addr="$subnet.$([[ $side == a ]] && echo 2 || echo 3)"
    ip netns add "$ns" || fail "cannot create network namespace $ns"
    ip link add "dsv${tag}$side" type veth peer name "dsp${tag}$side"
    ip link set "dsv${tag}$side" master "$bridge" up
    ip link set "dsp${tag}$side" netns "$ns"
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$addr/24" dev "dsp${tag}$side"
    ip -n "$ns" link set "dsp${tag}$side" up
  done
}

# start_ns_agent NS ADDR NAME TOKEN_FILE: starts dsagent inside namespace NS
# listening on ADDR, sets AGENT_ADDR (host:port). (Not called as $(...): the
# pid must reach CLEANUP_PIDS in this shell, and a fail in a subshell ends
# only the subshell.)
start_ns_agent() {
  local out="$WORK/agent_$3.ready"
  ip netns exec "$1" "$DSAGENT" --listen "$2:0" --token_file "$4" --name "$3" --lease_ms 2000 \
    >"$out" 2>"$WORK/agent_$3.log" &
  CLEANUP_PIDS+=($!)
  wait_until 20 grep -q DSAGENT_READY "$out" || fail "agent $3 did not start in $1"
  AGENT_ADDR=$(awk '/DSAGENT_READY/ {print $2}' "$out")
  [[ -n $AGENT_ADDR ]] || fail "agent $3: no address in its ready line: $(cat "$out")"
}
