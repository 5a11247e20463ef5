// The largest job dslaunch plans. Every count that comes from the command line
// or a hostfile is checked against these where it is parsed, so that no input
// can make planning allocate without bound (a slot list per rank, a rank per
// slot) or print gigabytes with --dry_run. The table of every input bound is
// in docs/inputs.md; keep it in step.
#pragma once

namespace dslaunch {

// Slots (devices) of one host: a hostfile's slots=N and --num_gpus. Hosts with
// 8-16 GPUs are the norm; CPU jobs that run one rank per core stay far below.
inline constexpr int kMaxSlotsPerHost = 1024;

// Hosts: lines of a hostfile, --num_nodes (and MIN:MAX), --min_nodes, --agents.
inline constexpr int kMaxHosts = 65536;

// Slots of a whole hostfile, summed over its hosts (what node selection may
// hold in memory at once).
inline constexpr int kMaxHostfileSlots = 1 << 20;

// Ranks of one job, after --num_nodes/--num_gpus/--include/--exclude.
inline constexpr int kMaxWorldSize = 131072;

}  // namespace dslaunch
