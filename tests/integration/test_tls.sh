#!/usr/bin/env bash
# Note [Mutual TLS] (common/tls_files.h), issue 22: every connection of a job
# over mutual TLS, from `dslaunch certs`' files.
#  1. `dslaunch certs` makes a CA and a folder for 127.0.0.1 (and one for a
#     second host, signed by the same CA, in a second call).
#  2. A static agent with --tls_dir; dslaunch --agents --tls_dir runs two
#     Python ranks (python/dslaunch) that meet in the store and send
#     heartbeats, both over TLS with DSLAUNCH_TLS_DIR; `dslaunch status`
#     asks the controller over TLS, from the job status file's folder alone.
#  3. The same agent refuses what has no certificate: a dslaunch without
#     --tls_dir fails naming the agent, and agent_intruder's plaintext calls
#     all fail at the handshake.
#  4. The local launcher with --tls_dir: its agents get the folder, the job
#     passes as in 2.
#  5. A folder with a key others can read is refused by dslaunch and dsagent,
#     naming the file, before anything starts.
source "$(dirname "$0")/lib.sh"
PY=${REFERENCE_PYTHON:-/usr/bin/python3}
"$PY" -c 'import grpc' 2>/dev/null || fail "$PY lacks grpc (scripts/setup.sh installs python3-grpcio)"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH=$ROOT/python
export DSLAUNCH_RUN_DIR=$WORK/run

"$DSLAUNCH" certs --out "$WORK/certs" --hosts 127.0.0.1 --days 2 >"$WORK/certs.out" || fail "dslaunch certs failed"
"$DSLAUNCH" certs --out "$WORK/certs" --hosts node-b >>"$WORK/certs.out" || fail "dslaunch certs (a second host) failed"
TLS=$WORK/certs/127.0.0.1
cmp -s "$TLS/ca.crt" "$WORK/certs/node-b/ca.crt" || fail "the second host was not signed by the same CA"
openssl verify -CAfile "$WORK/certs/ca.crt" "$TLS/tls.crt" "$WORK/certs/node-b/tls.crt" >"$WORK/verify.out" ||
  fail "openssl does not verify the certificates: $(cat "$WORK/verify.out")"
openssl x509 -in "$TLS/tls.crt" -noout -ext subjectAltName,extendedKeyUsage >"$WORK/names.out"
grep -q 'IP Address:127.0.0.1' "$WORK/names.out" && grep -q 'DNS:localhost' "$WORK/names.out" &&
  grep -q 'TLS Web Client Authentication' "$WORK/names.out" || fail "certificate names: $(cat "$WORK/names.out")"
pass "dslaunch certs: a CA, two hosts signed by it, openssl verifies them"

# The ranks: meet in the store, send a heartbeat and wait until the agent
# accepted it; rank 0 then holds the job until the test has asked for its status.
cat >"$WORK/rank.py" <<'PY'
import os, sys, time
import dslaunch
hold = sys.argv[1]
assert os.environ.get("DSLAUNCH_TLS_DIR"), "no DSLAUNCH_TLS_DIR"
store = dslaunch.store()
store.set("arrived/%d" % dslaunch.rank(), "1")
store.wait(["arrived/%d" % r for r in range(dslaunch.world_size())], 60)
dslaunch.heartbeat(1, loss=0.5, total_steps=2)
if not dslaunch.wait_for_heartbeat(60):
    sys.exit("no heartbeat accepted")
print("RANK_OK accepted=%d" % dslaunch.heartbeats_accepted(), flush=True)
if dslaunch.rank() == 0:
    open(hold + ".running", "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(hold + ".done") and time.monotonic() < deadline:
        time.sleep(0.02)
PY

# run_tls_job NAME [dslaunch options...]: a 2-rank job of rank.py; checks
# its ranks and its status over TLS while it runs.
run_tls_job() {
  local name=$1
  shift
  "$DSLAUNCH" "$@" --num_gpus 2 --job_id "$name" --log_dir "$WORK/logs" --no_local_rank \
    "$PY" "$WORK/rank.py" "$WORK/$name" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  local launcher=$!
  CLEANUP_PIDS+=("$launcher")
  wait_until 60 test -e "$WORK/$name.running" ||
    { kill "$launcher"; fail "$name: rank 0 did not get a heartbeat through: $(tail -n 5 "$WORK/$name.err")"; }
  "$DSLAUNCH" status --job "$name" >"$WORK/$name.status" 2>&1 ||
    { touch "$WORK/$name.done"; fail "$name: dslaunch status: $(cat "$WORK/$name.status")"; }
  # The status file names the folder: `dslaunch status` needed no flag.
  grep -qx "tls_dir $TLS" "$WORK/run/$name.status" ||
    { touch "$WORK/$name.done"; fail "$name: the status file has no tls_dir: $(cat "$WORK/run/$name.status")"; }
  touch "$WORK/$name.done"
  local code
  set +e
  wait "$launcher"
  code=$?
  set -e
  ((code == 0)) || fail "$name: exit $code: $(tail -n 5 "$WORK/$name.err")"
  (($(grep -c 'RANK_OK' "$WORK/$name.out") == 2)) || fail "$name: not both ranks passed: $(cat "$WORK/$name.out")"
  grep -q "job $name: RUNNING" "$WORK/$name.status" || fail "$name: status: $(cat "$WORK/$name.status")"
  grep -qE '^0 +[^ ]+ +0 +running +[0-9]+ +1 ' "$WORK/$name.status" || fail "$name: rank 0's heartbeat step: $(cat "$WORK/$name.status")"
}

new_token "$WORK/token"
start_agent a 127.0.0.1:0 "$WORK/token" --tls_dir "$TLS"
run_tls_job static --agents "$AGENT_ADDR" --token_file "$WORK/token" --tls_dir "$TLS"
pass "--agents over mutual TLS: store, heartbeats and dslaunch status"

set +e
"$DSLAUNCH" --agents "$AGENT_ADDR" --token_file "$WORK/token" --num_gpus 1 --job_id plain --log_dir "$WORK/logs" \
  "$TEST_RANK" >"$WORK/plain.out" 2>"$WORK/plain.err"
code=$?
set -e
((code != 0)) || fail "a plaintext dslaunch got through to the TLS agent"
grep -q "agent .*$AGENT_ADDR.* Describe" "$WORK/plain.err" || fail "plaintext: no error naming the agent: $(cat "$WORK/plain.err")"
grep -q 'started' "$WORK/agent_a.log" && grep -q 'job plain' "$WORK/agent_a.log" && fail "the TLS agent ran something for plaintext"
cat "$WORK/token" >"$WORK/candidates"
set +e
"$AGENT_INTRUDER" "$AGENT_ADDR" "$WORK/candidates" static >"$WORK/intruder.out" 2>&1
code=$?
set -e
((code == 0)) || fail "a plaintext call got through: $(cat "$WORK/intruder.out")"
grep -q '0 of 1 candidate(s) open Describe' "$WORK/intruder.out" || fail "plaintext Describe: $(cat "$WORK/intruder.out")"
grep -q 'refused [0-9]* x StopJob 14: ' "$WORK/intruder.out" || fail "plaintext StopJob: $(cat "$WORK/intruder.out")"
pass "a plaintext dslaunch and plaintext calls with the right token are refused by the TLS agent: $(sed -n 's/^dslaunch: //p' "$WORK/plain.err" | head -n 1)"

run_tls_job local --tls_dir "$TLS"
pass "the local launcher over mutual TLS: its agents, store, heartbeats and status"

cp -r "$TLS" "$WORK/open"
chmod 644 "$WORK/open/tls.key"
set +e
"$DSLAUNCH" --num_gpus 1 --tls_dir "$WORK/open" "$TEST_RANK" >"$WORK/open.out" 2>"$WORK/open.err"
code=$?
"$DSAGENT" --token_file "$WORK/token" --tls_dir "$WORK/open" >"$WORK/open_agent.out" 2>"$WORK/open_agent.err"
agent_code=$?
set -e
((code == 2)) || fail "an open key: dslaunch exited $code: $(cat "$WORK/open.err")"
((agent_code != 0)) || fail "an open key: dsagent started"
grep -q 'tls.key is accessible by other users (mode 0644)' "$WORK/open.err" || fail "dslaunch: $(cat "$WORK/open.err")"
grep -q 'tls.key is accessible by other users (mode 0644)' "$WORK/open_agent.err" || fail "dsagent: $(cat "$WORK/open_agent.err")"
pass "a TLS folder whose key others can read is refused by dslaunch and dsagent, naming the file"
