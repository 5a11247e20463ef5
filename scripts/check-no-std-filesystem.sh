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
# destructor). So everything that may be linked with LibTorch goes through
# runtime/fs/ (file_system.h, path.h) or plain POSIX calls instead:
# runtime/, kernels/, tests/programs/, common/ (the shared helpers the
# runtime includes) and the launcher's rendezvous store (the LibTorch tests
# link the launcher's library for it: only the objects they need come in).
# Left out: comments (`//` to the end of a line, outside string literals, and
# lines inside /* */ blocks that begin with `*` or `/*`); common/'s own
# tests; the rest of launcher/ and agent/ (their programs link no LibTorch);
# runtime/fs/path_test.cc, which checks path.h against std::filesystem in a
# binary without LibTorch. Caught: std::filesystem, std::experimental::
# filesystem, a bare `filesystem::` (after a using-directive) and the
# <filesystem> and <experimental/filesystem> includes.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
if [[ ! -d $root/runtime || ! -d $root/common ]]; then
  echo "check-no-std-filesystem: $root has no runtime/ and common/ folders" >&2
  exit 2
fi
cd "$root"
folders=(runtime common)
for folder in kernels tests/programs; do [[ -d $folder ]] && folders+=("$folder"); done
files=()
while IFS= read -r -d '' file; do files+=("$file"); done < <(
  find "${folders[@]}" -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' \
       -o -name '*.cuh' -o -name '*.inc' -o -name '*.ipp' \) ! -path 'common/*_test.cc' ! -path runtime/fs/path_test.cc \
       -print0)
for file in launcher/rendezvous_store.h launcher/rendezvous_store.cc; do [[ -f $file ]] && files+=("$file"); done
found=""
if ((${#files[@]} > 0)); then
  found=$(awk '{
      code = $0
      if (code ~ /^[ \t]*(\*|\/\*)/) next                 # a line of a /* */ block
      gsub(/"([^"\\]|\\.)*"/, "\"\"", code)             # string literals emptied
      sub(/\/\/.*/, "", code)                            # then the comment dropped
      if (code ~ /std::(experimental::)?filesystem|filesystem::|#[ \t]*include[ \t]*<(experimental\/)?filesystem>/) {
        print FILENAME ":" FNR ": " $0
      }
    }' "${files[@]}")
fi
if [[ -n $found ]]; then
  echo "check-no-std-filesystem: std::filesystem in code that may be linked with LibTorch" \
       "(use runtime/fs/file_system.h or runtime/fs/path.h; Note [No std::filesystem beside LibTorch]):" >&2
  echo "$found" >&2
  exit 1
fi
echo "check-no-std-filesystem: no std::filesystem in ${#files[@]} files that may be linked with LibTorch"
