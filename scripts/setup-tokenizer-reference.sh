#!/usr/bin/env bash
# Installs the npm reference tokenizers of tests/tokenizer/ (pinned in its
# package-lock.json) into tests/tokenizer/node_modules/ (git-ignored).
# Idempotent and cached: nothing is fetched when node_modules already holds
# what the lock file names; npm's own cache (~/.npm) serves a reinstall.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/tests/tokenizer
stamp=$dir/node_modules/.dslaunch-lock-sha256
want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
  echo "setup: npm reference tokenizers present"
  exit 0
fi
echo "setup: installing the npm reference tokenizers into $dir/node_modules"
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
echo "$want" >"$stamp"
