#!/usr/bin/env bash
# Tests scripts/check-no-std-filesystem.sh on small planted trees: a clean
# tree passes; a use, an include and a namespace alias each fail, named by
# file and line; comments, common/'s own tests and runtime/fs/path_test.cc
# are left out.
set -euo pipefail
check=$(cd "$(dirname "$0")" && pwd)/check-no-std-filesystem.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "check-no-std-filesystem-test: $*" >&2
  exit 1
}

# plant TREE FILE LINE...: writes FILE under TREE with the given lines.
plant() {
  local tree=$1 file=$2
  shift 2
  mkdir -p "$(dirname "$tree/$file")"
  printf '%s\n' "$@" >"$tree/$file"
}

clean=$work/clean
plant "$clean" runtime/a/a.cc '#include "runtime/fs/path.h"' '// Not std::filesystem: it crashed.' \
  'int x = 0;  // not std::filesystem::remove_all'
plant "$clean" common/b_test.cc '#include <filesystem>' 'auto p = std::filesystem::path("x");'
plant "$clean" runtime/fs/path_test.cc '#include <filesystem>'
bash "$check" "$clean" >/dev/null 2>&1 || fail "a clean tree failed"

for line in '#include <filesystem>' '  std::filesystem::remove_all(dir);' 'namespace fs = std::filesystem;' \
            '# include <experimental/filesystem>'; do
  tree=$work/bad-$RANDOM
  plant "$tree" runtime/d.cc 'int d;'
  plant "$tree" common/c.h 'int a;' "$line"
  if out=$(bash "$check" "$tree" 2>&1); then fail "passed a tree with: $line"; fi
  grep -q "common/c.h:2: $line" <<<"$out" || fail "did not name common/c.h:2 for: $line (got: $out)"
done
echo "check-no-std-filesystem-test: passed"
