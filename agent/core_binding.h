// Binding each rank of a host to cores of its own: DeepSpeed's
// --bind_cores_to_rank and --bind_core_list.
//
// Note [Core binding]
// The agent splits the cores of its host among the ranks it starts for one
// request, in local-rank order: the --bind_core_list cores, or else the cores
// of the agent's own affinity mask (so a cgroup or a taskset of the agent is
// respected). Each rank gets len/ranks consecutive cores (the remainder is
// left unused, as DeepSpeed does), OMP_NUM_THREADS set to that number (as
// DeepSpeed does) unless the job sets it, and, when all its cores lie in one
// NUMA node, its memory bound to that node (as DeepSpeed's `numactl -m`).
// The rank's keeper applies both to itself before it forks the rank
// (sched_setaffinity, set_mempolicy(MPOL_BIND)), so every thread the rank
// ever starts inherits them; the CPU Adam then sizes its thread pool from
// the mask. Too few cores for the ranks, or a listed core the host does not
// have, refuses the request before any rank starts, naming the host.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch {

struct RankCores {
  std::vector<int> cores;
  int numa_node = -1;  // -1: the cores span several nodes (memory not bound)
};

// `ranks` shares of `available` (ascending), each with its NUMA node from
// `nodes` (node → its cores). `host` names this host in errors.
absl::StatusOr<std::vector<RankCores>> SplitCoresAmongRanks(const std::vector<int>& available, int ranks,
                                                            const std::map<int, std::vector<int>>& nodes,
                                                            const std::string& host);

// The cores of this process's affinity mask.
std::vector<int> AffinityCores();

// node → cores, from /sys/devices/system/node/node*/cpulist (empty without NUMA information).
std::map<int, std::vector<int>> NumaNodeCores();

}  // namespace dslaunch
