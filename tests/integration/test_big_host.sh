#!/usr/bin/env bash
# A big host: 1,024 ranks on one agent (Note [Environment once per node] in
# launcher/launch_plan.h). StartRanks carries the host's shared environment
# once, its deadline grows with the ranks, --dry_run prints the shared
# environment once per host, and every rank's output still arrives.
# Before: 1,024 ranks failed at once ("Received message larger than max
# (4882958 vs. 4194304)"), 512 took 8 s, and a dry run printed every slot's
# device list once per rank (quadratic).
source "$(dirname "$0")/lib.sh"
N=1024

# 1. The dry run is linear in the ranks: the device list appears once.
"$DSLAUNCH" --dry_run --num_gpus $N --no_local_rank /bin/true >"$WORK/dry.out" 2>"$WORK/dry.err" ||
  fail "dry run exited $?"
bytes=$(wc -c <"$WORK/dry.out")
((bytes < 400000)) || fail "dry run of $N ranks printed $bytes bytes"
(($(grep -c CUDA_VISIBLE_DEVICES "$WORK/dry.out") == 1)) || fail "the device list is printed more than once"
grep -q "^rank 1023: host localhost, local rank 1023 of $N, device 1023$" "$WORK/dry.out" || fail "dry run: no rank 1023"
grep -q '^  RANK=1023$' "$WORK/dry.out" || fail "dry run: rank 1023's own variables"
pass "dry run of $N ranks: $bytes bytes, the host's environment once"

# 2. 1,024 ranks start and end. The time is a benchmark figure (under 2 s on
#    an idle 2-core machine); the bounds are for a loaded CI: on 2 cores with
#    a busy loop on each and builds beside, StartRanks took over 30 s.
started_at=$(date +%s%N)
"$DSLAUNCH" --log_dir "$WORK/logs" --job_id big --num_gpus $N --no_local_rank /bin/true \
  >"$WORK/true.out" 2>"$WORK/true.err" || fail "$N /bin/true ranks: exit $?"
total_ms=$((($(date +%s%N) - started_at) / 1000000))
event_us() {  # PATTERN: time_us of the first event line matching it
  sed -nE "/$1/ { s/^\\{\"time_us\":([0-9]+),.*/\\1/p; q }" "$WORK/logs/big/events.jsonl"
}
attempt_us=$(event_us '"event":"attempt_start"')
running_us=$(event_us '"state":"JOB_RUNNING"')
[[ -n $attempt_us && -n $running_us ]] || fail "no attempt_start / JOB_RUNNING in events.jsonl"
start_ms=$(((running_us - attempt_us) / 1000))
echo "$N ranks on one host: StartRanks answered after ${start_ms} ms; the whole job took ${total_ms} ms"
((start_ms < 90000)) || fail "starting $N ranks took ${start_ms} ms"
((total_ms < 120000)) || fail "the job of $N ranks took ${total_ms} ms"
pass "$N /bin/true ranks on one host"

# 3. Each of 1,024 ranks prints a line with its own RANK and the shared WORLD_SIZE.
"$DSLAUNCH" --num_gpus $N --no_local_rank /bin/sh -c 'echo "rank $RANK of $WORLD_SIZE"' \
  >"$WORK/echo.out" 2>"$WORK/echo.err" || fail "$N echoing ranks: exit $?"
lines=$(grep -cE "\] rank [0-9]+ of $N$" "$WORK/echo.out" || true)
distinct=$({ grep -oE "\] rank [0-9]+ of $N$" "$WORK/echo.out" || true; } | sort -u | wc -l)
((lines == N && distinct == N)) || fail "$lines line(s) from $distinct distinct rank(s), expected $N"
pass "$N ranks each printed their own RANK and WORLD_SIZE=$N"
