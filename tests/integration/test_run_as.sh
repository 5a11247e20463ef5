#!/usr/bin/env bash
# Note [Ranks as another user] (agent/run_as_user.h), issue 22: a root agent
# with --run_as nobody.
#  1. A job's ranks run as nobody (uid, groups, HOME/USER), meet in the store
#     and exit 0.
#  2. A rank of such a job that reads everything it can finds no agent token:
#     the token file (root, 0600) and the agent's environment are closed to
#     it; it cannot signal the agent.
#  3. Refusals at start: an unknown user; a non-root agent asked to run ranks
#     as another user (setpriv).
#  4. Per job (dslaunch --run_as, dsagent --allow_run_as): on an agent that
#     allows nobody, a job that asks for nobody runs as nobody and a job that
#     asks for nothing runs as the agent (root); a job that asks for a user
#     the agent does not allow is refused, naming the user and the list, and
#     starts nothing; a job may ask for the agent's own --run_as user;
#     dslaunch passes --allow_run_as to agents it starts.
# Needs root; fails, never skips, without it.
source "$(dirname "$0")/lib.sh"
(($(id -u) == 0)) || fail "needs root (it starts an agent that changes the ranks' user)"
nobody_uid=$(id -u nobody) || fail "no user 'nobody' on this host"
# The ranks' folder: nobody can enter the test's folder and write here only.
chmod 711 "$WORK"
mkdir -p "$WORK/shared"
chmod 1777 "$WORK/shared"
# The build folder may sit where nobody cannot reach (a clone under /root).
install -m 755 "$TEST_RANK" "$WORK/shared/test_rank"

new_token "$WORK/token"
start_agent a 127.0.0.1:0 "$WORK/token" --run_as nobody
AGENT=$AGENT_PID
AGENT_A_ADDR=$AGENT_ADDR

cat >"$WORK/shared/rank.sh" <<'SCRIPT'
#!/usr/bin/env bash
# What a rank can see: its identity, the agent's token file and environment.
set -u
out=$1/rank_$RANK.txt
{
  echo "uid $(id -u) gid $(id -g) home $HOME user $USER"
  cat "$2" >/dev/null 2>&1 && echo "token readable" || echo "token closed"
  tr '\0' '\n' <"/proc/$3/environ" >/dev/null 2>&1 && echo "environ readable" || echo "environ closed"
  kill -0 "$3" 2>/dev/null && echo "agent signalable" || echo "agent not signalable"
} >"$out"
exec "$4" --store
SCRIPT
chmod 755 "$WORK/shared/rank.sh"

"$DSLAUNCH" --agents "$AGENT_ADDR" --token_file "$WORK/token" --num_gpus 2 --job_id asnobody --no_local_rank \
  --log_dir "$WORK/logs" "$WORK/shared/rank.sh" "$WORK/shared" "$WORK/token" "$AGENT" "$WORK/shared/test_rank" \
  >"$WORK/job.out" 2>"$WORK/job.err" || fail "the job as nobody exited $?: $(tail -n 5 "$WORK/job.err")"
(($(grep -c STORE_OK "$WORK/job.out") == 2)) || fail "the ranks did not meet in the store: $(cat "$WORK/job.out")"
for rank in 0 1; do
  report=$WORK/shared/rank_$rank.txt
  [[ -s $report ]] || fail "rank $rank wrote no report"
  grep -q "^uid $nobody_uid gid [0-9]* home [^ ]* user nobody$" "$report" || fail "rank $rank: $(head -n 1 "$report")"
  grep -qx "token closed" "$report" || fail "rank $rank could read the agent's token file"
  grep -qx "environ closed" "$report" || fail "rank $rank could read the agent's environment"
  grep -qx "agent not signalable" "$report" || fail "rank $rank could signal the agent"
  [[ $(stat -c %u "$report") == "$nobody_uid" ]] || fail "rank $rank's file is not nobody's"
done
pass "ranks as nobody: the job runs; the agent's token file and environment are closed to them, the agent beyond their signals"

set +e
"$DSAGENT" --token_file "$WORK/token" --run_as no-such-user-dslaunch >"$WORK/bad.out" 2>"$WORK/bad.err"
code=$?
setpriv --reuid="$nobody_uid" --regid="$(id -g nobody)" --clear-groups \
  "$DSAGENT" --token_stdin --run_as root <"$WORK/token" >"$WORK/nonroot.out" 2>"$WORK/nonroot.err"
nonroot=$?
set -e
((code != 0)) && grep -q -- '--run_as no-such-user-dslaunch: no such user' "$WORK/bad.err" ||
  fail "an unknown user: exit $code, $(cat "$WORK/bad.err")"
((nonroot != 0)) && grep -q -- "--run_as root: dsagent runs as uid $nobody_uid and cannot start ranks as uid 0" \
  "$WORK/nonroot.err" || fail "a non-root agent: exit $nonroot, $(cat "$WORK/nonroot.err")"
pass "refused at start: an unknown user, and a non-root agent asked to run ranks as root"

# 4. Per job: an agent that runs ranks as root unless a job asks for nobody.
new_token "$WORK/token2"
start_agent b 127.0.0.1:0 "$WORK/token2" --allow_run_as nobody
cat >"$WORK/shared/whoami.sh" <<'SCRIPT'
#!/usr/bin/env bash
echo "rank $RANK uid $(id -u) user ${USER:-}" >"$1/whoami_${2}_$RANK.txt"
SCRIPT
chmod 755 "$WORK/shared/whoami.sh"
per_job() {  # NAME [dslaunch options...]
  local name=$1
  shift
  "$DSLAUNCH" --agents "$AGENT_ADDR" --token_file "$WORK/token2" --num_gpus 2 --job_id "$name" --no_local_rank \
    "$@" "$WORK/shared/whoami.sh" "$WORK/shared" "$name" >"$WORK/$name.out" 2>"$WORK/$name.err"
}
per_job asked --run_as nobody || fail "the job that asked for nobody exited $?: $(tail -n 3 "$WORK/asked.err")"
per_job unasked || fail "the job that asked for no user exited $?: $(tail -n 3 "$WORK/unasked.err")"
for rank in 0 1; do
  grep -qx "rank $rank uid $nobody_uid user nobody" "$WORK/shared/whoami_asked_$rank.txt" ||
    fail "rank $rank of the job that asked for nobody: $(cat "$WORK/shared/whoami_asked_$rank.txt")"
  grep -q "^rank $rank uid 0 " "$WORK/shared/whoami_unasked_$rank.txt" ||
    fail "rank $rank of the job that asked for no user: $(cat "$WORK/shared/whoami_unasked_$rank.txt")"
done
if per_job refused --run_as daemon; then fail "a job that asked for a user the agent does not allow ran"; fi
grep -q "the job asks to run its ranks as 'daemon' (dslaunch --run_as), which this agent does not allow (dsagent --allow_run_as: nobody)" \
  "$WORK/refused.err" || fail "the refusal does not name the user and the list: $(tail -n 3 "$WORK/refused.err")"
compgen -G "$WORK/shared/whoami_refused_*" >/dev/null && fail "the refused job started a rank"
# A job may ask for the user the agent runs every rank as anyway.
"$DSLAUNCH" --agents "$AGENT_A_ADDR" --token_file "$WORK/token" --num_gpus 1 --job_id own --no_local_rank \
  --run_as nobody "$WORK/shared/whoami.sh" "$WORK/shared" own >"$WORK/own.out" 2>"$WORK/own.err" ||
  fail "a job asking for the agent's own --run_as user exited $?: $(tail -n 3 "$WORK/own.err")"
grep -qx "rank 0 uid $nobody_uid user nobody" "$WORK/shared/whoami_own_0.txt" ||
  fail "the job asking for the agent's own user: $(cat "$WORK/shared/whoami_own_0.txt")"
# Agents dslaunch starts itself are told to allow the job's user.
"$DSLAUNCH" --num_gpus 1 --no_local_rank --run_as nobody "$WORK/shared/whoami.sh" "$WORK/shared" local \
  >"$WORK/local.out" 2>"$WORK/local.err" || fail "a local job with --run_as nobody exited $?: $(tail -n 3 "$WORK/local.err")"
grep -qx "rank 0 uid $nobody_uid user nobody" "$WORK/shared/whoami_local_0.txt" ||
  fail "the local job's rank: $(cat "$WORK/shared/whoami_local_0.txt")"
pass "per job: --run_as nobody runs as nobody, no --run_as as the agent, a user the agent does not allow is refused by name before anything starts; local agents allow the job's user"
