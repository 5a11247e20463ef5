// From the command line to the list of nodes (hosts and slots) a job runs on,
// and how their agents come to be. Pure apart from reading the hostfile.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/launcher_options.h"
#include "launcher/resource_selection.h"

namespace dslaunch {

// DeepSpeed's default hostfile, used when --hostfile is not given and it exists.
inline constexpr char kDefaultHostfile[] = "/job/hostfile";

struct NodeResolution {
  std::vector<HostSlots> nodes;
  LauncherKind launcher = LauncherKind::kLocal;  // never kAuto
  std::string hostfile_used;                     // empty when none
  // The local slots came from CUDA_VISIBLE_DEVICES (the launcher says so).
  bool visible_devices_used = false;
};

// Inputs that come from the machine rather than the command line.
struct NodeResolutionContext {
  int local_gpu_count = 0;
  std::string local_hostname;
  // For --agents: the host of each agent and its GPU count (from Describe).
  std::vector<std::string> agent_hosts;
  std::vector<int> agent_gpu_counts;
  // Whether kDefaultHostfile exists (tests pass false).
  bool default_hostfile_exists = false;
  // CUDA_VISIBLE_DEVICES as dslaunch was started with it (empty: unset).
  std::string cuda_visible_devices;
  // Note [SLURM]: SLURM_JOB_NODELIST, SLURM_GPUS_ON_NODE, SLURM_GPUS_PER_NODE (empty: unset).
  std::string slurm_nodelist;
  std::string slurm_gpus_on_node;
  std::string slurm_gpus_per_node;
};

// The rules:
//  - --agents (static): one node per agent, in order; --hostfile is refused
//    (the agents name the hosts). Slots per node: --num_gpus, else the agent's
//    GPU count, at least 1.
//  - a hostfile (--hostfile, or /job/hostfile when it exists): its hosts, with
//    --num_nodes/--num_gpus/--include/--exclude applied as DeepSpeed does. An
//    explicit --hostfile that is missing is an error, never a fallback.
//  - neither, and CUDA_VISIBLE_DEVICES set for dslaunch (one node, no
//    --include/--exclude): localhost with those devices as its slots, the
//    first --num_gpus of them when given (DeepSpeed's conversion of the
//    variable into an include list).
//  - neither: --num_nodes (default 1) nodes on this machine, "localhost" for
//    one node or node0..nodeN-1, each with --num_gpus slots (default: this
//    machine's GPU count, at least 1); --include/--exclude still apply.
// --num_nodes/--num_gpus with --include/--exclude are refused in every mode,
// as DeepSpeed does.
// Launcher: --launcher when given; otherwise static with --agents, local when
// every host is this machine (or there is no hostfile), ssh otherwise.
absl::StatusOr<NodeResolution> ResolveNodes(const LauncherOptions& options,
                                            const NodeResolutionContext& context);

}  // namespace dslaunch
