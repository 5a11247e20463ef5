#!/usr/bin/env bash
# Issue 13 finding 9 (part): nothing dslaunch leaves behind, and what it
# checks before it starts.
#  1. Local agents get their token on stdin: no token file and no
#     /tmp/dslaunch-XXXXXX, even after SIGKILL of dslaunch.
#  2. Overrides after the job file are checked like those before it
#     (big.cfg --override train.steps=3 used to start the ranks, which then
#     failed on what --validate refuses).
#  3. --stop_grace_ms and --lease_ms have upper bounds, checked at parse time.
source "$(dirname "$0")/lib.sh"
CONFIG=$(cd "$(dirname "$0")/../../configs" && pwd)/gpt-tiny.cfg

# --- 1. No token on disk --------------------------------------------------------
mkdir -p "$WORK/pids"
"$DSLAUNCH" --num_gpus 1 "$TEST_RANK" --pid_dir "$WORK/pids" --sleep_ms 60000 >"$WORK/kill.out" 2>"$WORK/kill.err" &
launcher=$!
CLEANUP_PIDS+=("$launcher")
wait_until 30 files_at_least "$WORK/pids" 'rank_0.pid' 1 || fail "the rank did not start"
agent=$(pgrep -P "$launcher" -f dsagent) || fail "no local agent under dslaunch $launcher"
agent=${agent%%$'\n'*}
agent_args=$(tr '\0' ' ' <"/proc/$agent/cmdline")
token_dir=$({ grep -oE -- '--token_file [^ ]+' <<<"$agent_args" || true; } | awk '{print $2}' | xargs -r dirname)
[[ $agent_args == *--token_stdin* && -z $token_dir ]] ||
  fail "the local agent reads its token from a file: $agent_args"
kill -KILL "$launcher"
wait "$launcher" 2>/dev/null || true
wait_until 20 pid_gone "$(cat "$WORK/pids/rank_0.pid")" || fail "the rank outlived a SIGKILLed dslaunch"
[[ -z $token_dir || ! -e $token_dir ]] || fail "SIGKILL left $token_dir behind"
pass "local agents take the token on stdin; nothing on disk after SIGKILL"

# --- 2. Overrides after the job file ----------------------------------------------
expect_refused() {  # expect_refused NAME PATTERN ARGS...
  local name=$1 pattern=$2
  shift 2
  set +e
  "$DSLAUNCH" --num_gpus 1 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
  local code=$?
  set -e
  ((code == 2)) || fail "$name: exit $code, expected 2 ($(cat "$WORK/$name.err"))"
  grep -qF -- "$pattern" "$WORK/$name.err" || fail "$name: message lacks '$pattern': $(cat "$WORK/$name.err")"
}
steps='total_num_steps=3: must be greater than warmup_num_steps=20'
expect_refused before "$steps" --override train.steps=3 "$CONFIG"
expect_refused after "$steps" "$CONFIG" --override train.steps=3
expect_refused after_eq "$steps" "$CONFIG" --override=train.steps=3
expect_refused after_typo "unknown key 'train.stepz' (did you mean 'train.steps'?)" "$CONFIG" --override train.stepz=1
expect_refused after_flag "unknown flag --bogus" "$CONFIG" --bogus
# Both places together, in dsrank's order: dslaunch's first, so the later one wins.
"$DSLAUNCH" --num_gpus 1 --dry_run --override train.steps=3 "$CONFIG" --override train.steps=40 >"$WORK/dry.out" 2>&1 ||
  fail "a valid last override refused: $(cat "$WORK/dry.out")"
grep -q -- '--override train.steps=3 --override train.steps=40' "$WORK/dry.out" || fail "dry run argv"
pass "overrides after the job file are checked like those before it"

# --- 3. Upper bounds of durations ---------------------------------------------------
expect_refused grace "--stop_grace_ms '9223372036854': must be in 0..3600000" --stop_grace_ms 9223372036854 "$TEST_RANK"
expect_refused lease "--lease_ms '8600000000': must be in 500..86400000" --lease_ms 8600000000 "$TEST_RANK"
pass "--stop_grace_ms and --lease_ms bounds checked at parse time"
