#!/usr/bin/env bash
# dscomm_bench under dslaunch on the CPU/Gloo path at 2 and 4 ranks (the
# multi-GPU script runs the same program over NCCL): every collective at
# every size returns the right values, and rank 0 prints one row per size with
# bus bandwidth = algbw · 2(n-1)/n for all_reduce and · (n-1)/n otherwise.
# Bad flags are refused before anything starts.
source "$(dirname "$0")/lib.sh"
: "${DSCOMM_BENCH:?DSCOMM_BENCH must point at the dscomm_bench binary}"

for world in 2 4; do
  "$DSLAUNCH" --num_gpus $world "$DSCOMM_BENCH" --device cpu --min_bytes 4096 --max_bytes 65536 --iters 3 --warmup 1 \
    >"$WORK/w$world.out" 2>"$WORK/w$world.err" || fail "world $world exited $?: $(tail -n 3 "$WORK/w$world.err")"
  sed 's/^\[[^]]*\] //' "$WORK/w$world.out" >"$WORK/w$world.table"
  grep -q "dscomm_bench: $world rank(s), gloo, float" "$WORK/w$world.table" || fail "world $world: no header"
  # 3 collectives x 5 sizes (4 KiB .. 64 KiB), each checked.
  rows=$(grep -cE '^(all_reduce|reduce_scatter|all_gather) ' "$WORK/w$world.table" || true)
  ((rows == 15)) || fail "world $world: expected 15 rows, got $rows: $(cat "$WORK/w$world.table")"
  ! grep -q WRONG "$WORK/w$world.table" || fail "world $world: a collective returned wrong values"
  awk -v n=$world '/^(all_reduce|reduce_scatter|all_gather) / {
      f = ($1 == "all_reduce") ? 2 * (n - 1) / n : (n - 1) / n
      if ($4 <= 0 || ($5 - $4 * f) > 0.0002 || ($4 * f - $5) > 0.0002) { print "bad row: " $0; bad = 1 } }
    END { exit bad }' "$WORK/w$world.table" || fail "world $world: bus bandwidth is not algbw times the nccl-tests factor"
done
pass "dscomm_bench at 2 and 4 Gloo ranks: 15 checked rows each, nccl-tests bus bandwidth"

if "$DSLAUNCH" --num_gpus 2 "$DSCOMM_BENCH" --dtype int8 >"$WORK/bad.out" 2>&1; then fail "--dtype int8 was accepted"; fi
grep -q -- "--dtype 'int8': expected one of float, bfloat16" "$WORK/bad.out" || fail "no clear error: $(tail -n 3 "$WORK/bad.out")"
pass "a bad flag is refused with its name"
