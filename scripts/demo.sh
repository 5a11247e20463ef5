#!/usr/bin/env bash
# Sets up, builds, and runs the main job. Until the embedded runtime lands,
# that is a program launched across 2 local "nodes" x 2 ranks through real
# agents: every rank meets the others at a barrier in the rendezvous store
# and they agree on one value.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh" dslaunch dsagent store_barrier
bin=${BUILD_DIR:-$root/build}/bin
set -x
"$bin/dslaunch" --num_nodes 2 --num_gpus 2 --no_local_rank "$bin/store_barrier"
