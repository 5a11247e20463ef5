#!/usr/bin/env bash
# Sets up (Debian packages), builds, and runs the whole test suite: unit tests
# and the integration tests with real agents, processes and network namespaces.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "${BUILD_DIR:-$root/build}"
# Integration tests measure fail-fast latency; two at a time is what 2 cores take.
ctest --output-on-failure --timeout 300 -j "${TEST_JOBS:-2}"
# Note [Fuzzing]: every parser's libFuzzer target in a clang build folder of
# its own, after replaying the kept findings; FUZZ_SECONDS (15 here, two
# targets at a time) each from the seed corpus, with a fixed seed: a check
# that a change did not open a shallow crash, which fails for the change, not
# for a lucky draw. Searching deeper (new seeds) is a run of its own:
# FUZZ_SECONDS=600 scripts/fuzz.sh [target].
FUZZ_SECONDS=${FUZZ_SECONDS:-15} FUZZ_SEED=${FUZZ_SEED:-1} "$root/scripts/fuzz.sh"
