#!/usr/bin/env bash
# Fails when code that may be linked with LibTorch uses std::filesystem, and
# names each file and line (Note [No std::filesystem beside LibTorch]).
#
# Usage: scripts/check-no-std-filesystem.sh [ROOT]   (default: this checkout)
#
# Note [No std::filesystem beside LibTorch]
# The LibTorch 2.x wheels (the GPU host's LibTorch 2.11) carry and export
# std::filesystem functions of their own, built against another libstdc++; a
# program linked with them can bind its calls to those copies, and
# std::filesystem::remove_all jumped to address 0 there (the GPU host's
# serve_tests crashed in three tests that way, in a test helper's
# destructor). So everything under runtime/ and common/ (the runtime's
# libraries, tools and tests, and the shared helpers they include) goes
# through runtime/fs/ (file_system.h, path.h) or plain POSIX calls instead.
# Left out: comments (`//` to the end of a line); common/'s own tests and launcher/ and agent/ (they
# link no LibTorch); runtime/fs/path_test.cc, which checks path.h against
# std::filesystem in a binary without LibTorch.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
if [[ ! -d $root/runtime || ! -d $root/common ]]; then
  echo "check-no-std-filesystem: $root has no runtime/ and common/ folders" >&2
  exit 2
fi
cd "$root"
found=$(find runtime common -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
          ! -path 'common/*_test.cc' ! -path runtime/fs/path_test.cc -print0 |
        xargs -0 awk '{ code = $0; sub(/\/\/.*/, "", code)
                        if (code ~ /std::filesystem|#[ \t]*include[ \t]*<(experimental\/)?filesystem>/)
                          print FILENAME ":" FNR ": " $0 }')
if [[ -n $found ]]; then
  echo "check-no-std-filesystem: std::filesystem in code that may be linked with LibTorch" \
       "(use runtime/fs/file_system.h or runtime/fs/path.h; Note [No std::filesystem beside LibTorch]):" >&2
  echo "$found" >&2
  exit 1
fi
echo "check-no-std-filesystem: no std::filesystem under runtime/ and common/ (but its own tests)"
