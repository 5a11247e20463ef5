#!/usr/bin/env bash
# Note [SLURM] (launcher/slurm_environment.h): `dslaunch --launcher slurm`
# inside an allocation, with two network namespaces playing its two hosts and
# tests/integration/fake_srun.sh standing in for srun (it runs the step in the
# namespace --nodelist names). The hosts come from SLURM_JOB_NODELIST in
# SLURM's hostlist syntax, the slots from SLURM_GPUS_PER_NODE; each agent is
# a one-task step on its host; ranks on both hosts reach each other and the
# store; the agents end with the job; the token goes down each step's stdin
# (no token file). Outside an allocation dslaunch refuses before starting
# anything.
# Needs root (ip netns); fails, never skips, without it.
source "$(dirname "$0")/lib.sh"

setup_two_host_network
new_token "$WORK/token"
prefix=${ADDR_A%.*}
srun_log="$WORK/srun.log"

SLURM_JOB_NODELIST="$prefix.[${ADDR_A##*.}-${ADDR_B##*.}]" SLURM_GPUS_PER_NODE=gpu:2 \
  FAKE_SSH_HOSTS="$ADDR_A=$NS_A,$ADDR_B=$NS_B" FAKE_SRUN_LOG="$srun_log" \
  "$DSLAUNCH" --launcher slurm --slurm_command "bash $(dirname "$0")/fake_srun.sh --overlap" \
  "$TEST_RANK" --check_env --store >"$WORK/slurm.out" 2>"$WORK/slurm.err" ||
  fail "the SLURM job exited $?: $(tail -5 "$WORK/slurm.err")"
(($(grep -c 'ENV_OK' "$WORK/slurm.out") == 4)) || fail "expected 4 ranks: $(cat "$WORK/slurm.out")"
grep -q "^\[$ADDR_B:3\] ENV_OK rank=3 local_rank=1 world=4 node=1" "$WORK/slurm.out" || fail "rank 3 is not on $ADDR_B"
(($(grep -c STORE_OK "$WORK/slurm.out") == 4)) || fail "ranks on both hosts must reach the store"
for addr in "$ADDR_A" "$ADDR_B"; do
  grep -qx -- "--overlap --nodes=1 --ntasks=1 --nodelist=$addr" "$srun_log" ||
    fail "no one-task step on $addr: $(cat "$srun_log")"
done
(($(wc -l <"$srun_log") == 2)) || fail "expected one step per host: $(cat "$srun_log")"
wait_until 10 bash -c "! ip netns pids $NS_A | xargs -r ps -o args= -p | grep -q -- --exit_on_stdin_eof" ||
  fail "an agent started by srun outlived the job"
pass "--launcher slurm: SLURM_JOB_NODELIST's 2 hosts x SLURM_GPUS_PER_NODE's 2 slots, one srun step per agent (token on its stdin, no file), store reached"

refused() {  # NAME PATTERN [env assignments] -- dslaunch arguments
  local name=$1 pattern=$2 code
  shift 2
  set +e
  env "$@" >"$WORK/$name.out" 2>&1
  code=$?
  set -e
  ((code == 2)) && grep -q -- "$pattern" "$WORK/$name.out" || fail "$name (exit $code): $(cat "$WORK/$name.out")"
}
refused outside "SLURM_JOB_NODELIST is not set" -u SLURM_JOB_NODELIST \
  "$DSLAUNCH" --launcher slurm --token_file "$WORK/token" "$TEST_RANK"
refused bad_list "SLURM_JOB_NODELIST='$prefix.\[2-'" SLURM_JOB_NODELIST="$prefix.[2-" \
  "$DSLAUNCH" --launcher slurm --token_file "$WORK/token" "$TEST_RANK"
[[ ! -s $srun_log || $(wc -l <"$srun_log") == 2 ]] || fail "a refused job started a step"
pass "outside an allocation, or with a broken node list: refused before any step"
