#!/usr/bin/env bash
# Note [Fuzzing] (tests/fuzz/CMakeLists.txt): builds the libFuzzer targets in
# a clang build folder of their own (build-fuzz/, or $FUZZ_BUILD_DIR) and runs
# each target:
#   1. every input of tests/fuzz/regressions/<target>/ once (findings that
#      were fixed: they must stay fixed);
#   2. FUZZ_SECONDS (default 30) of fuzzing that starts from
#      tests/fuzz/corpus/<target>/ and writes what it learns to a scratch
#      folder (the repository's corpus is left as it is).
# FUZZ_SEED fixes libFuzzer's seed (scripts/test.sh fixes it: CI replays the
# same search every run, so a red CI is the change's doing, not the draw's);
# unset, every run draws a new one.
# Targets run FUZZ_JOBS (default: one per core) at a time, each on one core.
# A finding fails the script once the targets running beside it end: it
# prints the target's report and the input (as hex when it is small), and
# leaves the input under /tmp/dslaunch-fuzz.*.
# Once the bug is fixed, copy that input into tests/fuzz/regressions/<target>/.
#   scripts/fuzz.sh [target ...]      (default: every target; e.g. hostfile)
set -euo pipefail
shopt -s nullglob
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-30}
seed_flag=()
[[ -n ${FUZZ_SEED:-} ]] && seed_flag=(-seed="$FUZZ_SEED")
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is missing (scripts/setup.sh installs clang)" >&2; exit 1; }

targets=("$@")
if ((${#targets[@]} == 0)); then
  for dir in "$root"/tests/fuzz/corpus/*/; do targets+=("$(basename "$dir")"); done
fi
# -O1 and line tables: fast enough to fuzz, enough for readable stacks.
# Batched like the main build (Note [Unity build]; UNITY_BUILD=0 to not):
# 97 s instead of 146 s for the ten targets of then on 2 cores.
unity=ON
[[ ${UNITY_BUILD:-1} == 0 ]] && unity=OFF
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DDSLAUNCH_FUZZ=ON \
  -DDSLAUNCH_UNITY_BUILD=$unity \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" >/dev/null
ninja -C "$build" -j "${JOBS:-$(nproc)}" "${targets[@]/%/_fuzzer}"

work=$(mktemp -d /tmp/dslaunch-fuzz.XXXXXX)
export TMPDIR=$work  # the targets that need a file write theirs here
report_finding() {  # TARGET LOG
  echo "fuzz.sh: $1: FINDING" >&2
  grep -av '^#[0-9]' "$2" | tail -n 60 >&2
  for input in "$work/$1"-crash-* "$work/$1"-leak-* "$work/$1"-timeout-* "$work/$1"-oom-*; do
    [[ -e $input ]] || continue
    echo "fuzz.sh: the input: $input ($(stat -c %s "$input") bytes)" >&2
    (($(stat -c %s "$input") <= 4096)) && od -An -tx1 -v "$input" | tr -d ' \n' >&2 && echo >&2
  done
  echo "fuzz.sh: reproduce with: $build/bin/$1_fuzzer INPUT" >&2
}
fuzz_one() {  # TARGET: its regression inputs, then its fuzzing; non-zero on a failure
  local target=$1 bin=$build/bin/${1}_fuzzer runs cov
  local regressions=("$root/tests/fuzz/regressions/$target"/*)
  if ((${#regressions[@]} > 0)); then
    "$bin" -timeout=10 -rss_limit_mb=2048 "${regressions[@]}" >"$work/$target.regressions.log" 2>&1 || {
      echo "fuzz.sh: $target: a regression input fails again" >&2
      tail -n 60 "$work/$target.regressions.log" >&2
      return 1
    }
  fi
  mkdir -p "$work/$target"
  if ! "$bin" "${seed_flag[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
      -artifact_prefix="$work/$target-" -print_final_stats=1 \
      "$work/$target" "$root/tests/fuzz/corpus/$target" >"$work/$target.log" 2>&1; then
    report_finding "$target" "$work/$target.log"
    return 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$target.log")
  cov=$(grep -ao 'cov: [0-9]*' "$work/$target.log" | tail -n 1 || true)
  echo "fuzz.sh: $target: ${runs:-?} inputs in ${seconds} s, ${cov:-cov: ?}, ${#regressions[@]} regression input(s), no finding"
}
# A libFuzzer process fuzzes on one core: on a 2-core machine two targets at
# a time take half the time, each fuzzed as long.
jobs=${FUZZ_JOBS:-$(nproc)}
failed=0
running=0
for target in "${targets[@]}"; do
  fuzz_one "$target" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || failed=1
    running=$((running - 1))
    ((failed == 0)) || break
  fi
done
while ((running > 0)); do
  wait -n || failed=1
  running=$((running - 1))
done
((failed == 0)) || exit 1
rm -rf "$work"
