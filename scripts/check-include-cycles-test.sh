#!/usr/bin/env bash
# Tests scripts/check-include-cycles.sh on small planted trees: it passes a
# layered tree, fails a tree with a folder cycle and names each edge of the
# cycle with its include, and ignores test files.
set -euo pipefail
check=$(cd "$(dirname "$0")" && pwd)/check-include-cycles.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "check-include-cycles-test: $*" >&2
  exit 1
}

# plant TREE FILE INCLUDE...: writes FILE under TREE including each INCLUDE.
plant() {
  local tree=$1 file=$2
  shift 2
  mkdir -p "$(dirname "$tree/$file")"
  : >"$tree/$file"
  for included in "$@"; do
    echo "#include \"$included\"" >>"$tree/$file"
  done
}

# A layered tree: b includes a, a includes common and third-party headers.
layered=$work/layered
plant "$layered" common/log.h
plant "$layered" runtime/a/a.h common/log.h absl/status/status.h
plant "$layered" runtime/b/b.h runtime/a/a.h
plant "$layered" runtime/b/b.cc runtime/b/b.h
# A test of a may use b (tests sit above their folder): not a cycle.
plant "$layered" runtime/a/a_test.cc runtime/b/b.h
output=$(bash "$check" "$layered" 2>&1) || fail "a layered tree was refused: $output"
grep -q '^no include cycles: 3 folders, 2 folder edges$' <<<"$output" ||
  fail "unexpected summary for the layered tree: $output"

# Plant a cycle: a's source includes b, b's header includes a.
cyclic=$work/cyclic
cp -r "$layered" "$cyclic"
plant "$cyclic" runtime/a/a.cc runtime/a/a.h runtime/b/b.h
status=0
output=$(bash "$check" "$cyclic" 2>&1) || status=$?
((status == 1)) || fail "a tree with a cycle gave status $status, want 1: $output"
for want in \
  'include cycle between folders: runtime/a -> runtime/b -> runtime/a' \
  '  runtime/a -> runtime/b: runtime/a/a.cc:2 includes "runtime/b/b.h"' \
  '  runtime/b -> runtime/a: runtime/b/b.h:1 includes "runtime/a/a.h"'; do
  grep -qxF "$want" <<<"$output" || fail "the report lacks '$want': $output"
done

# A longer cycle through a folder outside runtime/ is found too.
long=$work/long
cp -r "$layered" "$long"
plant "$long" common/log.h runtime/b/b.h
status=0
output=$(bash "$check" "$long" 2>&1) || status=$?
((status == 1)) || fail "a three-folder cycle gave status $status, want 1: $output"
grep -qxF 'include cycle between folders: common -> runtime/b -> runtime/a -> common' <<<"$output" ||
  fail "the three-folder cycle is not named: $output"

echo "check-include-cycles-test: passed"
