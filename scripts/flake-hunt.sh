#!/usr/bin/env bash
# Runs a set of ctest tests many times in a row on a machine made busy on
# purpose, to find the tests that fail only now and then (issue 14: "a CI
# that never flakes"). Beside the tests, one busy loop per core (like
# `yes >/dev/null`) takes CPU away from them, as other jobs do on a shared CI
# machine. Every failing run's output is kept; a summary counts the failures
# per test.
#
# Usage: scripts/flake-hunt.sh [options] [-- more ctest arguments]
#   -n, --runs N           runs (default 20)
#   -R, --regex REGEX      tests to run, as ctest -R (default '^integration\.',
#                          every test of tests/integration/)
#   -E, --exclude REGEX    tests to leave out, as ctest -E
#   -j, --jobs N           tests at a time, as ctest -j (default 2, as CI)
#   -l, --load N           busy loops beside the tests (default: one per core;
#                          0 for none)
#   -x, --stop-on-failure  stop after the first run with a failure (default:
#                          go on to the last run)
#   -b, --build-dir DIR    build folder (default $BUILD_DIR or build/)
#   -o, --out DIR          results folder (default /tmp/flake-hunt.<time>)
#   -h, --help             this text
# Results in the folder:
#   summary.txt            runs, failures per test and which runs failed
#   runs.tsv               run, ctest's exit status, seconds, failed tests
#   run-N.log              ctest's output of run N
#   failures/TEST/run-N.log  the output of TEST in a run where it failed
# Exit status: 0 when every run passed, 1 when a test failed, 2 for bad
# arguments, 128+signal when interrupted (the busy loops are gone then too).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
die() { echo "flake-hunt: $*" >&2; exit 2; }

runs=20
regex='^integration\.'
exclude=''
jobs=2
load=$(nproc)
stop_on_failure=false
build_dir=${BUILD_DIR:-$root/build}
out=''
while (($# > 0)); do
  case $1 in
    -n | --runs) runs=${2:?$1 needs a value}; shift 2 ;;
    -R | --regex) regex=${2:?$1 needs a value}; shift 2 ;;
    -E | --exclude) exclude=${2:?$1 needs a value}; shift 2 ;;
    -j | --jobs) jobs=${2:?$1 needs a value}; shift 2 ;;
    -l | --load) load=${2:?$1 needs a value}; shift 2 ;;
    -x | --stop-on-failure) stop_on_failure=true; shift ;;
    -b | --build-dir) build_dir=${2:?$1 needs a value}; shift 2 ;;
    -o | --out) out=${2:?$1 needs a value}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
extra_ctest_args=("$@")
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "--runs is a positive number, not '$runs'"
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs is a positive number, not '$jobs'"
[[ $load =~ ^[0-9]+$ ]] || die "--load is a number of busy loops, not '$load'"
[[ -f $build_dir/CTestTestfile.cmake ]] || die "no tests in $build_dir (build first: scripts/build.sh)"
out=${out:-/tmp/flake-hunt.$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$out/failures" || die "cannot create $out"

selection=(-R "$regex")
[[ -n $exclude ]] && selection+=(-E "$exclude")
mapfile -t tests < <(ctest --test-dir "$build_dir" -N "${selection[@]}" | sed -nE 's/^ *Test +#[0-9]+: (.*)$/\1/p')
((${#tests[@]} > 0)) || die "no test matches -R '$regex'${exclude:+ -E '$exclude'} in $build_dir"

# Each run is one process session: ctest, its tests, and the busy loops
# beside them, started by a small shell that then becomes ctest. In one
# session they compete for the CPU as equals (a scheduler that groups by
# session, like Linux's autogroup, would otherwise share it between the
# loops' session and the tests' one, whatever the number of loops), and the
# session ends as one: each loop dies with ctest (`setpriv --pdeathsig`,
# where util-linux has it; else a shell loop that checks on ctest), also
# when this script is SIGKILLed, and on_exit stops the whole process group.
run_with_busy_loops='
  for ((i = 0; i < $1; i++)); do
    if setpriv --pdeathsig KILL true 2>/dev/null; then
      setpriv --pdeathsig KILL yes >/dev/null &
    else
      bash -c "while kill -0 $$ 2>/dev/null; do for ((n = 0; n < 200000; n++)); do :; done; done" &
    fi
  done
  shift
  exec "$@"'
ctest_pid=''

declare -A failures=()   # test -> number of failed runs
declare -A failed_in=()  # test -> "run numbers"
done_runs=0
failed_runs=0
started_at=$SECONDS

write_summary() {
  local test
  {
    echo "flake hunt: $done_runs of $runs run(s) done, $failed_runs with a failure ($((SECONDS - started_at)) s)"
    echo "tests: ${#tests[@]} matching -R '$regex'${exclude:+ -E '$exclude'}; ctest -j $jobs; $load busy loop(s) on $(nproc) core(s)"
    echo "build: $build_dir"
    if ((${#failures[@]} == 0)); then
      echo "no test failed"
    else
      echo "failures (test: failed runs / runs; which runs; logs under $out/failures/TEST/):"
      for test in $(printf '%s\n' "${!failures[@]}" | sort); do
        echo "  $test: ${failures[$test]} / $done_runs; run(s)${failed_in[$test]}"
      done
    fi
  } >"$out/summary.txt"
}

on_exit() {
  local code=$?
  # A second signal (GNU timeout sends one to the child and one to its whole
  # process group) must not cut the clean-up short: it is bounded anyway.
  trap - EXIT
  trap '' INT TERM HUP
  if [[ -n $ctest_pid ]]; then
    # ctest, its tests and the busy loops are a process group of their own:
    # SIGTERM lets the test scripts run their EXIT traps (namespaces,
    # agents); SIGKILL after 10 s for what is left.
    kill -TERM -- "-$ctest_pid" 2>/dev/null || true
    for _ in {1..100}; do kill -0 -- "-$ctest_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$ctest_pid" 2>/dev/null || true
  fi
  if [[ -d $out ]]; then
    write_summary
    cat "$out/summary.txt"
  fi
  exit "$code"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# save_failures RUN JUNIT: one log per failed test of the run, from ctest's
# JUnit file; prints the names of the failed tests.
save_failures() {
  python3 - "$1" "$2" "$out/failures" <<'EOF'
import os, re, sys, xml.etree.ElementTree as ET
run, junit, folder = sys.argv[1:]
for case in ET.parse(junit).getroot().iter("testcase"):
    failed = case.get("status") not in (None, "run") or case.find("failure") is not None or case.find("error") is not None
    if not failed:
        continue
    name = case.get("name")
    os.makedirs(os.path.join(folder, re.sub(r"[^A-Za-z0-9_.-]", "_", name)), exist_ok=True)
    with open(os.path.join(folder, re.sub(r"[^A-Za-z0-9_.-]", "_", name), "run-%s.log" % run), "w") as f:
        failure = case.find("failure")
        f.write("# %s, run %s: %s after %s s\n" % (name, run, (failure.get("message") if failure is not None else "") or case.get("status"), case.get("time")))
        out = case.find("system-out")
        f.write(out.text if out is not None and out.text else "(no output)\n")
    print(name)
EOF
}

printf 'run\tctest_exit\tseconds\tfailed\n' >"$out/runs.tsv"
echo "flake hunt: ${#tests[@]} test(s) x $runs run(s), ctest -j $jobs, $load busy loop(s); results in $out"
for ((run = 1; run <= runs; run++)); do
  run_started=$SECONDS
  junit="$out/run-$run.junit.xml"
  code=0
  # A background child is no group leader, so setsid does not fork: $! is
  # the session, its process group and (after the exec) ctest.
  setsid bash -c "$run_with_busy_loops" busy-loops "$load" ctest --test-dir "$build_dir" "${selection[@]}" -j "$jobs" --output-on-failure --output-junit "$junit" \
    "${extra_ctest_args[@]+"${extra_ctest_args[@]}"}" >"$out/run-$run.log" 2>&1 &
  ctest_pid=$!
  wait "$ctest_pid" || code=$?
  ctest_pid=''
  failed=()
  if [[ -f $junit ]]; then
    mapfile -t failed < <(save_failures "$run" "$junit")
  fi
  if ((code != 0 && ${#failed[@]} == 0)); then
    failed=("ctest-exit-$code")  # ctest itself failed: its log says why
    mkdir -p "$out/failures/${failed[0]}"
    cp "$out/run-$run.log" "$out/failures/${failed[0]}/run-$run.log"
  fi
  for test in "${failed[@]+"${failed[@]}"}"; do
    failures[$test]=$((${failures[$test]:-0} + 1))
    failed_in[$test]="${failed_in[$test]:-} $run"
  done
  done_runs=$run
  ((${#failed[@]} == 0)) || failed_runs=$((failed_runs + 1))
  printf '%d\t%d\t%d\t%s\n' "$run" "$code" $((SECONDS - run_started)) "${failed[*]+"${failed[*]}"}" >>"$out/runs.tsv"
  echo "run $run/$runs: $((SECONDS - run_started)) s, ${#failed[@]} failed${failed[*]:+: ${failed[*]}}"
  write_summary
  if ((${#failed[@]} > 0)) && $stop_on_failure; then
    echo "stopping after the first failing run (--stop-on-failure)"
    break
  fi
done
((failed_runs == 0))
