#!/usr/bin/env bash
# A job that really crosses hosts: two network namespaces with their own
# addresses on a bridge play two hosts. Agents run inside them; the controller
# and its store run outside. Covers static agents, the ssh launcher path (with
# "ip netns exec" standing in for ssh) and a host whose link is cut mid-run.
# Needs root (ip netns); fails, never skips, without it.
source "$(dirname "$0")/lib.sh"

[[ $(id -u) -eq 0 ]] || fail "this test creates network namespaces and must run as root"
command -v ip >/dev/null || fail "iproute2 (ip) is not installed"

tag=$$
subnet="10.213.$((tag % 250 + 1))"
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
new_token "$WORK/token"

# 1. Static agents, one per "host".
start_ns_agent() {  # start_ns_agent NS ADDR NAME
  local out="$WORK/agent_$3.ready"
  ip netns exec "$1" "$DSAGENT" --listen "$2:0" --token_file "$WORK/token" --name "$3" --lease_ms 2000 \
    >"$out" 2>"$WORK/agent_$3.log" &
  CLEANUP_PIDS+=($!)
  wait_until 20 grep -q DSAGENT_READY "$out" || fail "agent $3 did not start in $1"
  awk '/DSAGENT_READY/ {print $2}' "$out"
}
AGENT_A=$(start_ns_agent "$NS_A" "$ADDR_A" host-a)
AGENT_B=$(start_ns_agent "$NS_B" "$ADDR_B" host-b)
[[ $AGENT_A == "$ADDR_A:"* && $AGENT_B == "$ADDR_B:"* ]] || fail "agents bound $AGENT_A $AGENT_B"

"$DSLAUNCH" --agents "$AGENT_A,$AGENT_B" --token_file "$WORK/token" --num_gpus 2 \
  "$TEST_RANK" --check_env --store >"$WORK/static.out" 2>"$WORK/static.err" || fail "static job exited $?"
(($(grep -c 'ENV_OK' "$WORK/static.out") == 4)) || fail "static job: 4 ranks expected"
grep -q "^\[host-b:3\] ENV_OK rank=3 local_rank=1 world=4 node=1 cvd=0,1 master=$ADDR_A:" "$WORK/static.out" || fail "rank 3 on host-b must see MASTER_ADDR $ADDR_A"
(($(grep -c STORE_OK "$WORK/static.out") == 4)) || fail "ranks in both namespaces must reach the store at $CONTROLLER_ADDR"
pass "static agents in two namespaces: 4 ranks across hosts, store reached from both"

# 2. The ssh launcher path: dslaunch starts the agents itself on each host.
printf '%s slots=2\n%s slots=2\n' "$ADDR_A" "$ADDR_B" >"$WORK/hostfile"
FAKE_SSH_HOSTS="$ADDR_A=$NS_A,$ADDR_B=$NS_B" "$DSLAUNCH" --hostfile "$WORK/hostfile" \
  --ssh_command "bash $(dirname "$0")/fake_ssh.sh" --token_file "$WORK/token" \
  "$TEST_RANK" --check_env --store >"$WORK/ssh.out" 2>"$WORK/ssh.err" || fail "ssh-launched job exited $?"
grep -q "^\[$ADDR_B:2\] ENV_OK rank=2 local_rank=0 world=4 node=1" "$WORK/ssh.out" || fail "ssh job rank 2"
(($(grep -c STORE_OK "$WORK/ssh.out") == 4)) || fail "ssh job store"
# The agents it started are gone with it (stdin closed -> agent exits).
wait_until 10 bash -c "! ip netns pids $NS_A | xargs -r ps -o args= -p | grep -q -- --exit_on_stdin_eof" || fail "ssh-started agent outlived the job"
pass "ssh launcher path across two hosts"

# 3. A host vanishes (its link is cut): the job fails as a lost host; the
#    other host's ranks are stopped by the controller, the lost host's ranks
#    by their agent when the lease runs out.
mkdir -p "$WORK/pids"
set +e
"$DSLAUNCH" --agents "$AGENT_A,$AGENT_B" --token_file "$WORK/token" --num_gpus 1 --lease_ms 2000 \
  "$TEST_RANK" --pid_dir "$WORK/pids" --sleep_ms 120000 >"$WORK/cut.out" 2>"$WORK/cut.err" &
launcher=$!
CLEANUP_PIDS+=("$launcher")
wait_until 30 files_at_least "$WORK/pids" 'rank_*.pid' 2 || fail "ranks did not start"
cut_at=$SECONDS
ip link set "dsv${tag}b" down
wait "$launcher"
code=$?
set -e
((code != 0)) || fail "a job that lost a host succeeded"
grep -q 'lost host host-b' "$WORK/cut.err" || fail "cause must name the lost host: $(cat "$WORK/cut.err")"
echo "lost host detected and job ended after $((SECONDS - cut_at)) s"
wait_until 20 all_pids_gone "$WORK"/pids/rank_*.pid || fail "a rank survived the lost host"
pass "lost host: job failed naming host-b, every rank gone"
