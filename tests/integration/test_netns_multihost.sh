#!/usr/bin/env bash
# A job that really crosses hosts: two network namespaces with their own
# addresses on a bridge play two hosts. Agents run inside them; the controller
# and its store run outside. Covers static agents, the ssh launcher path (with
# "ip netns exec" standing in for ssh) and a host whose link is cut mid-run.
# Needs root (ip netns); fails, never skips, without it.
source "$(dirname "$0")/lib.sh"

setup_two_host_network
new_token "$WORK/token"

# 1. Static agents, one per "host".
start_ns_agent "$NS_A" "$ADDR_A" host-a "$WORK/token"
AGENT_A=$AGENT_ADDR
start_ns_agent "$NS_B" "$ADDR_B" host-b "$WORK/token"
AGENT_B=$AGENT_ADDR
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
# The store listens where the ranks reach it, not on every interface.
listening=$(ss -Hltnp | grep "pid=$launcher," | awk '{print $4}' || true)
[[ -n $listening ]] || fail "found no socket dslaunch listens on"
while read -r address; do
  # (gRPC's IPv6 socket shows the IPv4 address mapped: [::ffff:a.b.c.d]:port)
  [[ $address == "$CONTROLLER_ADDR:"* || $address == "[::ffff:$CONTROLLER_ADDR]:"* ]] || fail "dslaunch listens on $address, not only on $CONTROLLER_ADDR: $listening"
done <<<"$listening"
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
