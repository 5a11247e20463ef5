#!/usr/bin/env bash
# Sets up, builds, and runs the main job: dslaunch trains configs/gpt-tiny.cfg
# (a small GPT on Debian's fortune files, prepared on first use) on 2 CPU ranks
# over Gloo through real agents. The same job file runs on GPUs with NCCL.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ ! -x ${BUILD_DIR:-$root/build}/bin/dsrank ]]; then
  echo "demo: the first run installs packages and builds dslaunch (about 25 minutes on 2 cores); later runs start at once" >&2
fi
"$root/scripts/setup.sh"
"$root/scripts/build.sh" dslaunch dsagent dsrank
bin=${BUILD_DIR:-$root/build}/bin
cd "$root"
set -x
"$bin/dslaunch" --num_gpus 2 configs/gpt-tiny.cfg
