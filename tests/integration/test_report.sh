#!/usr/bin/env bash
# `dslaunch report` (DeepSpeed's ds_report, issue 21): the host's facts from
# dslaunch and the runtime's from `dsrank --report`, each named; a misspelled
# flag is a usage error with its hint once.
source "$(dirname "$0")/lib.sh"
: "${DSRANK:?}"
# dslaunch finds dsrank beside itself: the build tree's bin/ holds both.
[[ $(dirname "$DSLAUNCH") == $(dirname "$DSRANK") ]] || fail "dsrank is not beside dslaunch: $DSLAUNCH, $DSRANK"

"$DSLAUNCH" report >"$WORK/report.out" 2>"$WORK/report.err" || fail "dslaunch report exited $?: $(cat "$WORK/report.err")"
for expected in '^== this host$' '^version: dslaunch [0-9.]+ \(rank environment contract v[0-9]+\)$' \
  '^gRPC: [0-9.]+; protobuf: [0-9.]+$' '^CPU: .*; [0-9]+ cores in this process.s affinity mask of [0-9]+ online$' \
  '^memory: [0-9.]+ GiB; NUMA nodes: [0-9]+$' '^io_uring: (available|not available: )' \
  '^== GPUs \(the driver.s view: nvidia-smi\)$' '^== the runtime \(.*dsrank --report\)$' \
  '^  version: dsrank [0-9.]+ ' '^  LibTorch: [0-9]+\.[0-9]+\.[0-9]+, with CUDA: (yes|no), CUDA devices it sees: [0-9]+$' \
  '^  collective backends compiled in: gloo' '^  fused attention \(SDPA\): ' \
  '^  CPU Adam \(offload\): (scalar|avx2|avx512) on [0-9]+ threads; this CPU supports scalar'; do
  grep -Eq "$expected" "$WORK/report.out" || fail "the report lacks /$expected/: $(cat "$WORK/report.out")"
done
[[ ! -s $WORK/report.err ]] || fail "the report wrote to stderr: $(cat "$WORK/report.err")"
pass "dslaunch report names the versions, the CPU, memory, io_uring, the GPUs and the runtime's build"

"$DSRANK" --report >"$WORK/dsrank.out" || fail "dsrank --report exited $?"
grep -q '^LibTorch: ' "$WORK/dsrank.out" || fail "dsrank --report: $(cat "$WORK/dsrank.out")"
set +e
"$DSRANK" --report "$WORK/some.cfg" >/dev/null 2>"$WORK/dsrank-job.err"
code=$?
"$DSLAUNCH" report --bogus >"$WORK/bogus.out" 2>"$WORK/bogus.err"
bogus=$?
set -e
((code != 0)) && grep -q -- "--report takes no job file" "$WORK/dsrank-job.err" ||
  fail "dsrank --report with a job file: exit $code, $(cat "$WORK/dsrank-job.err")"
((bogus == 2)) || fail "dslaunch report --bogus: exit $bogus"
(($(grep -c -- "--help lists the flags" "$WORK/bogus.err") == 1)) || fail "the hint is not printed once: $(cat "$WORK/bogus.err")"
pass "dsrank --report alone, and a bad flag refused with its hint once"

# --check: dscomm_bench through dslaunch over the hosts the options after --
# select (here two local Gloo ranks), every collective checked.
"$DSLAUNCH" report --check --check_max_bytes 2097152 -- --num_gpus 2 >"$WORK/check.out" 2>"$WORK/check.err" ||
  fail "report --check exited $?: $(tail -5 "$WORK/check.out" "$WORK/check.err")"
grep -Eq '^== collectives over the job.s hosts \(.*dslaunch --num_gpus 2 .*dscomm_bench --min_bytes 1048576 --max_bytes 2097152' \
  "$WORK/check.out" || fail "no --check header: $(cat "$WORK/check.out")"
rows=$(grep -cE '(all_reduce|reduce_scatter|all_gather) +(1048576|2097152) ' "$WORK/check.out" || true)
((rows == 6)) || fail "expected 6 checked rows (3 collectives x 2 sizes), got $rows: $(cat "$WORK/check.out")"
grep -q '^check: every collective returned the right values' "$WORK/check.out" || fail "no verdict: $(tail -3 "$WORK/check.out")"
set +e
"$DSLAUNCH" report extra >/dev/null 2>"$WORK/extra.err"
extra=$?
set -e
((extra == 2)) && grep -q "unexpected argument 'extra' (host options go after --check --)" "$WORK/extra.err" ||
  fail "a stray argument without --check: exit $extra, $(cat "$WORK/extra.err")"
pass "report --check runs every collective over the selected hosts through dslaunch and prints its bus bandwidth"
