#!/usr/bin/env bash
# Bad input is an exact error and nothing starts; --dry_run prints the plan.
source "$(dirname "$0")/lib.sh"

mkdir -p "$WORK/pids"
expect_error() {  # expect_error PATTERN ARGS...
  local pattern=$1
  shift
  set +e
  "$DSLAUNCH" "$@" >"$WORK/err.out" 2>"$WORK/err.err"
  local code=$?
  set -e
  ((code == 2)) || fail "'$*' exited $code, expected 2"
  grep -qF -- "$pattern" "$WORK/err.err" || fail "'$*': message lacks '$pattern': $(cat "$WORK/err.err")"
  (($(count_files "$WORK/pids" '*.pid') == 0)) || fail "'$*' started a rank"
}

expect_error "$WORK/nope" --hostfile "$WORK/nope" "$TEST_RANK" --pid_dir "$WORK/pids"
printf 'localhost slots=2\nworker-1 slot=4\n' >"$WORK/bad_hosts"
expect_error "$WORK/bad_hosts:2: 'worker-1 slot=4'" --hostfile "$WORK/bad_hosts" "$TEST_RANK" --pid_dir "$WORK/pids"
printf 'localhost slots=2\nlocalhost slots=2\n' >"$WORK/dup_hosts"
expect_error "duplicate host 'localhost' (first on line 1)" --hostfile "$WORK/dup_hosts" "$TEST_RANK" --pid_dir "$WORK/pids"
printf 'localhost slots=2\n' >"$WORK/hosts"
expect_error "worker-9" --hostfile "$WORK/hosts" --include worker-9 "$TEST_RANK" --pid_dir "$WORK/pids"
expect_error "slot 5" --hostfile "$WORK/hosts" --exclude localhost:5 "$TEST_RANK" --pid_dir "$WORK/pids"
expect_error "--num_gpu" --num_gpu 2 "$TEST_RANK"
expect_error "missing PROGRAM" --num_gpus 2
pass "input errors name the file, line, flag and text; nothing started"

"$DSLAUNCH" --dry_run --hostfile "$WORK/hosts" --master_port 29611 "$TEST_RANK" --x >"$WORK/dry.out" 2>"$WORK/dry.err" || fail "dry run exited $?"
grep -q '^rank 1: host localhost, local rank 1 of 2, device 1$' "$WORK/dry.out" || fail "dry run placement"
grep -q '^  argv: .*test_rank --x --local_rank=1$' "$WORK/dry.out" || fail "dry run argv"
grep -q '^  MASTER_PORT=29611$' "$WORK/dry.out" || fail "dry run env"
grep -q '^  CUDA_VISIBLE_DEVICES=0,1$' "$WORK/dry.out" || fail "dry run devices"
pass "dry run prints the plan"
