#!/usr/bin/env bash
# The ssh launcher against a real sshd (Debian's openssh-server): two network
# namespaces play two hosts, each running its own sshd on its own address;
# dslaunch outside them starts the agents with the real ssh client and a key
# made for the test, as on a cluster.
#   1. A job over ssh: 4 ranks on two hosts, the store reached from both,
#      and the agents gone with the job (their ssh sessions closed). Every
#      connection is mutual TLS (Note [Mutual TLS]) with one certificate
#      from `dslaunch certs --one_for_all` that names both hosts and the
#      controller's address, in a folder both "hosts" share (as an NFS home
#      would be).
#   2. A host that refuses the key: dslaunch fails before any rank starts,
#      naming the host and quoting ssh, and nothing is left running.
# Needs root (ip netns, sshd); fails, never skips, without them.
source "$(dirname "$0")/lib.sh"

SSHD=/usr/sbin/sshd
[[ -x $SSHD ]] || fail "$SSHD is missing (scripts/setup.sh installs openssh-server)"
command -v ssh-keygen >/dev/null || fail "ssh-keygen is missing (openssh-client)"

setup_two_host_network
mkdir -p /run/sshd  # sshd's privilege separation directory
ssh-keygen -q -t ed25519 -N '' -f "$WORK/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$WORK/user_key"
ssh-keygen -q -t ed25519 -N '' -f "$WORK/other_key"
cp "$WORK/user_key.pub" "$WORK/authorized_keys"

# start_sshd NS ADDR: an sshd in NS on ADDR:22 that takes the test's key;
# returns once it listens (its "Server listening" line).
start_sshd() {
  local ns=$1 addr=$2
  cat >"$WORK/sshd_$ns.conf" <<CONF
ListenAddress $addr:22
HostKey $WORK/host_key
AuthorizedKeysFile $WORK/authorized_keys
PidFile $WORK/sshd_$ns.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
CONF
  ip netns exec "$ns" "$SSHD" -D -e -f "$WORK/sshd_$ns.conf" 2>"$WORK/sshd_$ns.log" &
  CLEANUP_PIDS+=($!)
  wait_until 20 grep -q "Server listening on $addr port 22" "$WORK/sshd_$ns.log" ||
    fail "sshd in $ns did not listen: $(cat "$WORK/sshd_$ns.log")"
}
start_sshd "$NS_A" "$ADDR_A"
start_sshd "$NS_B" "$ADDR_B"

ssh_options="-o BatchMode=yes -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=$WORK/known_hosts -o ConnectTimeout=10"
printf '%s slots=2\n%s slots=2\n' "$ADDR_A" "$ADDR_B" >"$WORK/hostfile"

# 1. A job over real ssh.
# No --token_file: a token of this run goes down each ssh session's stdin.
"$DSLAUNCH" certs --out "$WORK/certs" --hosts "$ADDR_A,$ADDR_B,$CONTROLLER_ADDR" --one_for_all >"$WORK/certs.out" ||
  fail "dslaunch certs --one_for_all failed"
"$DSLAUNCH" --hostfile "$WORK/hostfile" --ssh_command "ssh -i $WORK/user_key $ssh_options" \
  --tls_dir "$WORK/certs/all-hosts" \
  --job_id sshjob --log_dir "$WORK/logs" "$TEST_RANK" --check_env --store --sleep_ms 1000 \
  >"$WORK/ssh.out" 2>"$WORK/ssh.err" &
job=$!
CLEANUP_PIDS+=("$job")
# While it runs: no agent's command line names a token or a token file.
agent_args() { ip netns pids "$1" | xargs -r ps -o args= -p | grep -- --exit_on_stdin_eof || true; }
wait_until 30 bash -c "ip netns pids $NS_B | xargs -r ps -o args= -p | grep -q -- --exit_on_stdin_eof" ||
  fail "no agent started on $ADDR_B"
for ns in "$NS_A" "$NS_B"; do
  args=$(agent_args "$ns")
  [[ $args == *--token_stdin* && $args != *token_file* ]] || fail "an agent's command line: $args"
  [[ $args == *"--tls_dir $WORK/certs/all-hosts"* ]] || fail "an agent started without --tls_dir: $args"
done
wait "$job" || fail "the job over ssh exited $?: $(tail -5 "$WORK/ssh.err")"
# Each agent listened where its ssh connection came in (SSH_CONNECTION), not on every interface.
for addr in "$ADDR_A" "$ADDR_B"; do
  grep -q "listening on $addr:[0-9]*," "$WORK/logs/sshjob/agent_$addr.log" ||
    fail "the agent on $addr did not listen on $addr: $(grep listening "$WORK/logs/sshjob/agent_$addr.log")"
done
(($(grep -c ENV_OK "$WORK/ssh.out") == 4)) || fail "4 ranks expected over ssh"
grep -q "^\[$ADDR_B:3\] ENV_OK rank=3 local_rank=1 world=4 node=1 cvd=0,1 master=$ADDR_A:" "$WORK/ssh.out" ||
  fail "rank 3 on $ADDR_B must see MASTER_ADDR $ADDR_A"
(($(grep -c STORE_OK "$WORK/ssh.out") == 4)) || fail "ranks on both hosts must reach the store"
# ssh recorded each host's key on first contact (hashed names: ask ssh-keygen).
ssh-keygen -F "$ADDR_A" -f "$WORK/known_hosts" >/dev/null && ssh-keygen -F "$ADDR_B" -f "$WORK/known_hosts" >/dev/null ||
  fail "ssh did not connect to both hosts (known_hosts has $(wc -l <"$WORK/known_hosts") entries)"
agents_in() { ip netns pids "$1" | xargs -r ps -o args= -p | grep -c -- '--exit_on_stdin_eof' || true; }
wait_until 20 bash -c "[[ \$(ip netns pids $NS_A | xargs -r ps -o args= -p | grep -c -- --exit_on_stdin_eof) == 0 &&
                          \$(ip netns pids $NS_B | xargs -r ps -o args= -p | grep -c -- --exit_on_stdin_eof) == 0 ]]" ||
  fail "an agent started over ssh outlived the job: A $(agents_in "$NS_A"), B $(agents_in "$NS_B")"
pass "real ssh to two hosts without a token file, over mutual TLS: the token on the agents' stdin, agents on the ssh address only, 4 ranks, MASTER_ADDR and the store across hosts, agents gone with the job"

# 2. A key host B's sshd does not take: host A's agent may start, host B's
#    cannot; the job ends with ssh's own words and no rank ever starts.
printf '%s slots=2\n%s slots=2\n' "$ADDR_A" "$ADDR_B" >"$WORK/hostfile2"
sed -i "s|^AuthorizedKeysFile .*|AuthorizedKeysFile $WORK/no_keys|" "$WORK/sshd_$NS_B.conf"
kill -HUP "$(cat "$WORK/sshd_$NS_B.pid")"  # sshd rereads its config (and re-executes) on SIGHUP
listening_again() { (($(grep -c 'Server listening' "$WORK/sshd_$NS_B.log") >= 2)); }
wait_until 20 listening_again ||
  fail "sshd in $NS_B did not restart on SIGHUP"
mkdir -p "$WORK/pids"
set +e
"$DSLAUNCH" --hostfile "$WORK/hostfile2" --ssh_command "ssh -i $WORK/user_key $ssh_options" \
  "$TEST_RANK" --pid_dir "$WORK/pids" >"$WORK/refused.out" 2>"$WORK/refused.err"
code=$?
set -e
((code != 0)) || fail "a job with a host that refuses ssh succeeded"
grep -q "$ADDR_B" "$WORK/refused.err" || fail "the error must name the host: $(cat "$WORK/refused.err")"
grep -q "Permission denied (publickey)" "$WORK/refused.err" ||
  fail "the error must quote ssh: $(cat "$WORK/refused.err")"
(($(count_files "$WORK/pids" 'rank_*.pid') == 0)) || fail "a rank started although a host was unreachable"
wait_until 20 bash -c "[[ \$(ip netns pids $NS_A | xargs -r ps -o args= -p | grep -c -- --exit_on_stdin_eof) == 0 ]]" ||
  fail "host A's agent outlived the refused launch"
pass "a host refusing the key: the launch fails naming $ADDR_B with ssh's 'Permission denied (publickey)', no rank started"
