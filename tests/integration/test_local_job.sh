#!/usr/bin/env bash
# 2 local agents x 2 ranks: environment contract, rendezvous store, console
# prefixes and filter, per-rank log files, and the shipped store example.
source "$(dirname "$0")/lib.sh"

"$DSLAUNCH" --num_nodes 2 --num_gpus 2 --log_dir "$WORK/logs" --job_id itjob \
  "$TEST_RANK" --check_env --store >"$WORK/job.out" 2>"$WORK/job.err" || fail "job exited $?"
(($(grep -c '^\[node[01]:[0-3]\] ENV_OK' "$WORK/job.out") == 4)) || fail "expected 4 ENV_OK lines"
grep -q '^\[node0:0\] ENV_OK rank=0 local_rank=0 world=4 node=0 cvd=0,1 master=127.0.0.1:' "$WORK/job.out" || fail "rank 0 environment"
grep -q '^\[node1:3\] ENV_OK rank=3 local_rank=1 world=4 node=1 cvd=0,1' "$WORK/job.out" || fail "rank 3 environment"
# Every rank agreed on one leader through compare-and-set.
leaders=$({ grep -o 'STORE_OK rank=[0-9] leader=[0-9]' "$WORK/job.out" || true; } | awk '{print $3}' | sort -u | wc -l)
(($(grep -c STORE_OK "$WORK/job.out") == 4 && leaders == 1)) || fail "store agreement"
# One MASTER_PORT for everyone, picked by rank 0's agent.
ports=$({ grep -o 'master=127.0.0.1:[0-9]*' "$WORK/job.out" || true; } | sort -u | wc -l)
((ports == 1)) || fail "ranks saw different MASTER_PORTs"
for r in 0 1 2 3; do
  grep -q "ENV_OK rank=$r " "$WORK/logs/itjob/attempt_0/rank_$r.stdout.log" || fail "log file of rank $r"
done
pass "4 ranks on 2 agents: environment, store, logs"

"$DSLAUNCH" --num_nodes 2 --num_gpus 2 --console_ranks 1 --no_prefix "$TEST_RANK" --check_env \
  >"$WORK/filtered.out" 2>"$WORK/filtered.err" || fail "filtered job exited $?"
[[ $(wc -l <"$WORK/filtered.out") -eq 1 ]] && grep -q '^ENV_OK rank=1 ' "$WORK/filtered.out" || fail "--console_ranks 1 --no_prefix"
pass "console filter"

"$DSLAUNCH" --num_nodes 2 --num_gpus 2 --no_local_rank "$STORE_BARRIER" >"$WORK/example.out" 2>"$WORK/example.err" || fail "example exited $?"
values=$({ grep -o 'agreed value [0-9a-f]*' "$WORK/example.out" || true; } | sort -u | wc -l)
(($(grep -c 'all 4 ranks met' "$WORK/example.out") == 4 && values == 1)) || fail "store example"
pass "store example"
