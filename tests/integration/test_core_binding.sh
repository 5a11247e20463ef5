#!/usr/bin/env bash
# Note [Core binding] (agent/core_binding.h): --bind_cores_to_rank and
# --bind_core_list, as DeepSpeed's launcher has them. Each rank of a host
# runs on its own share of the cores (its keeper binds itself before the
# fork, so every thread of the rank inherits it), with OMP_NUM_THREADS set to
# that count; too few cores, a core the host lacks, or --bind_core_list alone
# are refused before anything starts.
source "$(dirname "$0")/lib.sh"
mine=$(grep Cpus_allowed_list /proc/self/status | awk '{print $2}')
first=$(cut -d, -f1 <<<"$mine" | cut -d- -f1)
second=$((first + 1))
grep -qE "(^|,)$first-([0-9]+)" <<<"$mine" || [[ $mine == *",$second"* ]] ||
  fail "this test needs two consecutive cores; this shell may use $mine"

report='echo "rank $RANK cores $(grep Cpus_allowed_list /proc/self/status | cut -f2) omp $OMP_NUM_THREADS"'
"$DSLAUNCH" --num_gpus 2 --no_local_rank --bind_cores_to_rank --bind_core_list "$first-$second" \
  bash -c "$report" >"$WORK/bound.out" 2>"$WORK/bound.err" || fail "the bound job exited $?: $(cat "$WORK/bound.err")"
grep -q "rank 0 cores $first omp 1$" "$WORK/bound.out" || fail "rank 0 is not on core $first: $(cat "$WORK/bound.out")"
grep -q "rank 1 cores $second omp 1$" "$WORK/bound.out" || fail "rank 1 is not on core $second: $(cat "$WORK/bound.out")"
pass "--bind_cores_to_rank --bind_core_list $first-$second: rank 0 on core $first, rank 1 on core $second, OMP_NUM_THREADS=1"

# Without a list, the agent's own cores; a job's own OMP_NUM_THREADS is kept.
OMP_NUM_THREADS=7 "$DSLAUNCH" --num_gpus 1 --no_local_rank --bind_cores_to_rank bash -c "$report" \
  >"$WORK/all.out" 2>"$WORK/all.err" || fail "the job on every core exited $?: $(cat "$WORK/all.err")"
grep -q "rank 0 cores $mine omp 7$" "$WORK/all.out" || fail "one rank should have every core ($mine): $(cat "$WORK/all.out")"
pass "one rank gets every core of the agent; a job's own OMP_NUM_THREADS is kept"

refused() {  # NAME PATTERN ARGS...: dslaunch fails, saying PATTERN, starting no rank
  local name=$1 pattern=$2
  shift 2
  set +e
  "$DSLAUNCH" --no_local_rank "$@" bash -c 'touch "$0"' "$WORK/$name.started" >"$WORK/$name.out" 2>&1
  local code=$?
  set -e
  ((code != 0)) || fail "$name: exit 0"
  grep -q -- "$pattern" "$WORK/$name.out" || fail "$name: $(cat "$WORK/$name.out")"
  [[ ! -e $WORK/$name.started ]] || fail "$name: a rank started"
}
refused too_few "has 1 core(s) to bind ($first) for 2 rank(s)" --num_gpus 2 --bind_cores_to_rank --bind_core_list "$first"
refused absent "--bind_core_list: core 4095 is not available on host" --num_gpus 1 --bind_cores_to_rank --bind_core_list 4095
refused alone "--bind_core_list names the cores --bind_cores_to_rank shares out" --num_gpus 1 --bind_core_list 0
refused syntax "--bind_core_list: '3-1' in '3-1' is not a core or a range" --num_gpus 1 --bind_cores_to_rank --bind_core_list 3-1
pass "too few cores, a core the host lacks, a list without --bind_cores_to_rank and a bad list are refused, nothing started"
