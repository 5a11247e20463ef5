#!/usr/bin/env bash
# Fails when the folders of the tree include each other in a circle, and names
# each circle with one example #include per edge (Note [Folder layers]).
#
# Usage: scripts/check-include-cycles.sh [--graph] [ROOT]
#   ROOT     the tree to check (default: this checkout)
#   --graph  print every folder edge (with one example include) and exit 0
#
# Note [Folder layers]
# A folder is a layer: runtime/<folder> for the runtime (runtime/ itself for
# the few headers at its top), and common/, launcher/, agent/, kernels/,
# proto/ (generated) as wholes. The graph has an edge A -> B when a file of A
# has `#include "B/..."`. Layers include downward only, so the graph has no
# cycle and each folder's library links only to libraries below it. Test
# files (*_test.cc) are left out: nothing includes a test, and a test sits
# above its folder's library (zero's equivalence test drives the engine).
# Only "..." includes naming one of those folders count; <...> and
# third-party paths (absl/, gtest/) are not folders of this tree.
#
# Plain bash and POSIX awk (Debian's mawk), so CI needs nothing installed.
set -euo pipefail

graph_only=0
if [[ ${1:-} == --graph ]]; then
  graph_only=1
  shift
fi
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
if [[ ! -d $root ]]; then
  echo "check-include-cycles: no such folder: $root" >&2
  exit 2
fi
cd "$root"

scanned=()
for folder in runtime common launcher agent kernels; do
  [[ -d $folder ]] && scanned+=("$folder")
done
if ((${#scanned[@]} == 0)); then
  echo "check-include-cycles: none of runtime/ common/ launcher/ agent/ kernels/ under $root" >&2
  exit 2
fi

# Pass 1: one line per cross-folder include: FROM<TAB>TO<TAB>file:line includes "path".
edges=$(find "${scanned[@]}" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) \
          ! -name '*_test.cc' | LC_ALL=C sort | awk '
  # The layer a path belongs to; "" for a path outside the tree'"'"'s folders.
  function layer(path,   parts, n) {
    n = split(path, parts, "/")
    if (parts[1] == "runtime") return n >= 3 ? "runtime/" parts[2] : "runtime"
    if (parts[1] ~ /^(common|launcher|agent|kernels|proto)$/ && n >= 2) return parts[1]
    return ""
  }
  {
    file = $0
    from = layer(file)
    line_number = 0
    while ((getline text < file) > 0) {
      line_number++
      if (text !~ /^[ \t]*#[ \t]*include[ \t]*"/) continue
      path = text
      sub(/^[ \t]*#[ \t]*include[ \t]*"/, "", path)
      sub(/".*$/, "", path)
      to = layer(path)
      if (to != "" && to != from)
        printf "%s\t%s\t%s:%d includes \"%s\"\n", from, to, file, line_number, path
    }
    close(file)
  }')

# Pass 2: keep the first example of each edge, then look for cycles depth first.
printf '%s\n' "$edges" | LC_ALL=C sort -t "$(printf '\t')" -k1,1 -k2,2 -s | awk -F '\t' -v graph_only="$graph_only" '
  NF == 3 && !(($1, $2) in example) {
    example[$1, $2] = $3
    adjacent[$1, ++degree[$1]] = $2
    if (!($1 in known)) { known[$1] = 1; nodes[++node_count] = $1 }
    if (!($2 in known)) { known[$2] = 1; nodes[++node_count] = $2 }
    edge_count++
  }
  # Colours: absent = unvisited, 1 = on the current path, 2 = done.
  function visit(u,   i, v, k) {
    colour[u] = 1
    path[++depth] = u
    position[u] = depth
    for (i = 1; i <= degree[u]; i++) {
      v = adjacent[u, i]
      if ((v in colour) && colour[v] == 1) {
        cycles++
        line = ""
        for (k = position[v]; k <= depth; k++) line = line path[k] " -> "
        print "include cycle between folders: " line v
        for (k = position[v]; k <= depth; k++)
          print "  " path[k] " -> " (k < depth ? path[k + 1] : v) ": " example[path[k], (k < depth ? path[k + 1] : v)]
      } else if (!(v in colour)) {
        visit(v)
      }
    }
    depth--
    colour[u] = 2
  }
  END {
    if (graph_only) {
      for (n = 1; n <= node_count; n++)
        for (i = 1; i <= degree[nodes[n]]; i++)
          print nodes[n] " -> " adjacent[nodes[n], i] ": " example[nodes[n], adjacent[nodes[n], i]]
      exit 0
    }
    for (n = 1; n <= node_count; n++)
      if (!(nodes[n] in colour)) visit(nodes[n])
    if (cycles > 0) {
      print cycles " include cycle(s): a folder may include only folders below it (Note [Folder layers] in scripts/check-include-cycles.sh)"
      exit 1
    }
    print "no include cycles: " node_count " folders, " edge_count " folder edges"
  }'
