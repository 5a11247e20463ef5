#!/usr/bin/env bash
# Runs the LibTorch layers' test binaries (one per runtime folder) from BIN,
# passing the rest of the arguments to each (e.g. --gtest_filter=...). Prints
# every binary's output; exits non-zero when any binary fails.
# Usage: scripts/gpu-runtime-tests.sh BIN [gtest arguments...]
set -uo pipefail
bin=$1
shift
status=0
for tests in comm_tests model_tests zero_tests engine_tests checkpoint_tests; do
  echo "== $tests"
  "$bin/$tests" "$@" || { echo "== $tests: exit $?"; status=1; }
done
exit $status
