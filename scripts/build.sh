#!/usr/bin/env bash
# Configures and builds everything into build/ (or $BUILD_DIR) with Ninja and
# ccache. Usage: scripts/build.sh [ninja targets...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Clones in other folders share the cache (paths are hashed relative to here).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
# DEBUG_INFO=0 drops -g: a third less compile time and far smaller objects
# and links (CI sets it; nothing in the suite reads debug info). Passed on
# every configure so one build folder follows the variable both ways.
debug_flag=-g
[[ ${DEBUG_INFO:-1} == 0 ]] && debug_flag=
# Note [Unity build] (CMakeLists.txt): batches of 8 files per translation
# unit halve a fresh build; UNITY_BUILD=0 compiles file by file (a quicker
# rebuild when one file changes).
unity=ON
[[ ${UNITY_BUILD:-1} == 0 ]] && unity=OFF
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 $debug_flag -DNDEBUG" -DDSLAUNCH_UNITY_BUILD=$unity >/dev/null
ninja -C "$build_dir" -j "$jobs" "$@"
