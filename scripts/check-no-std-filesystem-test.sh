#!/usr/bin/env bash
# Tests scripts/check-no-std-filesystem.sh on small planted trees: a clean
# tree passes; uses, includes and namespace aliases each fail in every
# folder scanned, named by file and line; comments, string literals,
# common/'s own tests, runtime/fs/path_test.cc and the launcher's other files
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
  'int x = 0;  // not std::filesystem::remove_all' '/* std::filesystem, once */' ' * std::filesystem::path' \
  'const char* s = "std::filesystem::path";  // a string'
plant "$clean" common/b_test.cc '#include <filesystem>' 'auto p = std::filesystem::path("x");'
plant "$clean" runtime/fs/path_test.cc '#include <filesystem>'
plant "$clean" launcher/job_file.cc '#include <filesystem>'  # links no LibTorch
bash "$check" "$clean" >/dev/null 2>&1 || fail "a clean tree failed"

n=0
for line in '#include <filesystem>' '  std::filesystem::remove_all(dir);' 'namespace fs = std::filesystem;' \
            '# include <experimental/filesystem>' 'f("http://x"); std::filesystem::remove_all(p);' \
            'using namespace std; filesystem::path p;' 'std::experimental::filesystem::path p;'; do
  for file in common/c.h runtime/x/y.cpp kernels/k.cu tests/programs/p.cc launcher/rendezvous_store.cc; do
    n=$((n + 1))
    tree=$work/bad-$n
    plant "$tree" runtime/d.cc 'int d;'
    plant "$tree" common/e.h 'int e;'
    plant "$tree" "$file" 'int a;' "$line"
    if out=$(bash "$check" "$tree" 2>&1); then fail "passed a tree with, in $file: $line"; fi
    grep -qF "$file:2: $line" <<<"$out" || fail "did not name $file:2 for: $line (got: $out)"
  done
done
echo "check-no-std-filesystem-test: passed"
