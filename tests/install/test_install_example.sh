#!/usr/bin/env bash
# Installs the build into a fresh prefix, builds the shipped example
# (runtime/examples/train_custom_model.cc) as an out-of-tree project with
# find_package(dslaunch), and trains it as one rank.
#
# Usage: test_install_example.sh SOURCE_DIR BUILD_DIR WORK_DIR [GENERATOR]
# WORK_DIR is emptied first; a fixed path (not mktemp) so that ccache reuses
# the example's compile from one run to the next.
set -euo pipefail
source_dir=$1 build_dir=$2 work=$3 generator=${4:-Ninja}

fail() {
  echo "test_install_example: $*" >&2
  exit 1
}

rm -rf "$work"
mkdir -p "$work/example"
prefix=$work/prefix

cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "cmake --install $build_dir failed (log above)"; }
[[ -f $prefix/include/dslaunch/runtime.h ]] || fail "no include/dslaunch/runtime.h under $prefix"
[[ -f $prefix/lib/cmake/dslaunch/dslaunchConfig.cmake ]] || fail "no lib/cmake/dslaunch/dslaunchConfig.cmake under $prefix"
# The package must stand on its own: no path into the tree it was built from.
if leaks=$(grep -rlF -e "$source_dir" -e "$build_dir" "$prefix/lib/cmake"); then
  fail "the installed package names the source or build tree: $leaks"
fi
echo "installed: $(find "$prefix/include" -name '*.h' | wc -l) headers," \
  "$(find "$prefix/include" -name '*.h' ! -path "$prefix/include/dslaunch/*" | wc -l) of them outside include/dslaunch/"
# <dslaunch/runtime.h> forward-declares the runtime's internals: none of
# their headers (nor generated proto headers) may be needed, or installed.
internal=$(find "$prefix/include" -name '*.h' ! -path "$prefix/include/dslaunch/*" | head -5)
[[ -z $internal ]] || fail "internal headers were installed beside the public API: $internal"

cp "$source_dir/tests/install/example/CMakeLists.txt" "$source_dir/runtime/examples/train_custom_model.cc" \
  "$work/example/"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$work/example" -B "$work/example/build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log" >&2; fail "configuring the example against $prefix failed (log above)"; }
cmake --build "$work/example/build" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log" >&2; fail "building the example against $prefix failed (log above)"; }

# One rank: no RANK/WORLD_SIZE, so the program trains alone.
status=0
output=$(env -u RANK -u WORLD_SIZE -u LOCAL_RANK "$work/example/build/train_custom_model" \
  "$source_dir/runtime/examples/ds_config.json" 2>&1) || status=$?
echo "$output"
((status == 0)) || fail "the installed example exited with status $status"
grep -q '^step=300 ' <<<"$output" || fail "the installed example did not report step 300"
echo "test_install_example: the example built against $prefix trained 300 steps"
