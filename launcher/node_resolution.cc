#include "launcher/node_resolution.h"

#include "launcher/slurm_environment.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/net_address.h"
#include "common/status_macros.h"
#include "launcher/hostfile.h"
#include "launcher/launch_limits.h"

namespace dslaunch {
namespace {

// A hostfile for hosts the controller made up itself (local nodes, agents).
Hostfile SyntheticHostfile(const std::vector<std::string>& hosts, const std::vector<int>& slots,
                           const std::string& origin) {
  Hostfile hostfile;
  hostfile.path = origin;
  for (size_t i = 0; i < hosts.size(); ++i) {
    hostfile.hosts.push_back({hosts[i], slots[i], static_cast<int>(i + 1)});
  }
  return hostfile;
}

bool IsThisMachine(const std::string& host, const std::string& local_hostname) {
  return IsLoopbackHost(host) || host == local_hostname;
}

// The job's rank count against kMaxWorldSize; `origin` says where the slots
// came from.
absl::Status CheckWorldSize(int64_t ranks, absl::string_view origin) {
  if (ranks <= kMaxWorldSize) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", ranks, " ranks; the most one job may have is ",
                                                 kMaxWorldSize));
}

absl::Status CheckWorldSize(const std::vector<HostSlots>& nodes, absl::string_view origin) {
  int64_t ranks = 0;
  for (const HostSlots& node : nodes) ranks += static_cast<int64_t>(node.slots.size());
  return CheckWorldSize(ranks, origin);
}

}  // namespace

absl::StatusOr<std::vector<int>> VisibleDeviceSlots(const std::string& value) {
  std::vector<int> slots;
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    int device = -1;
    if (!absl::SimpleAtoi(item, &device) || device < 0 || device >= kMaxSlotsPerHost) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CUDA_VISIBLE_DEVICES='", value, "': '", item,
          "' is not a device index; dslaunch turns the variable into this host's slots (as DeepSpeed turns it "
          "into an include list) and needs indices such as 0,2: give indices, or unset it"));
    }
    if (std::find(slots.begin(), slots.end(), device) != slots.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("CUDA_VISIBLE_DEVICES='", value, "': device ", device, " is listed twice"));
    }
    slots.push_back(device);
  }
  return slots;
}

absl::StatusOr<NodeResolution> ResolveNodes(const LauncherOptions& options,
                                            const NodeResolutionContext& context) {
  NodeResolution result;
  // As in DeepSpeed, in every mode: a list of hosts and slots already says
  // how many.
  if ((!options.include.empty() || !options.exclude.empty()) && (options.num_nodes > 0 || options.num_gpus > 0)) {
    const bool include = !options.include.empty();
    return absl::InvalidArgumentError(absl::StrCat(
        include ? "--include '" : "--exclude '", include ? options.include : options.exclude,
        "' cannot be used with ", options.num_nodes > 0 ? "--num_nodes" : "--num_gpus",
        ": the list already says which hosts and slots run"));
  }
  ResourceRequest selection{-1, -1, options.include, options.exclude};
  if (!options.agents.empty()) {
    if (options.hostfile_given) {
      return absl::InvalidArgumentError(
          "--hostfile and --agents both name the hosts; give only one of them");
    }
    std::vector<std::string> hosts = context.agent_hosts;
    std::vector<int> slots;
    for (size_t i = 0; i < hosts.size(); ++i) {
      int gpus = i < context.agent_gpu_counts.size() ? context.agent_gpu_counts[i] : 0;
      if (options.num_gpus <= 0 && gpus > kMaxSlotsPerHost) {
        return absl::InvalidArgumentError(absl::StrCat("--agents: the agent on ", hosts[i], " reports ", gpus,
                                                       " GPUs, more than the ", kMaxSlotsPerHost,
                                                       " slots one host may have; pass --num_gpus"));
      }
      slots.push_back(options.num_gpus > 0 ? options.num_gpus : std::max(1, gpus));
    }
    if (options.num_nodes > 0) {
      if (options.num_nodes > static_cast<int>(hosts.size())) {
        return absl::InvalidArgumentError(absl::StrCat("--num_nodes ", options.num_nodes, ": only ",
                                                       hosts.size(), " agent(s) in --agents"));
      }
      hosts.resize(options.num_nodes);
      slots.resize(options.num_nodes);
    }
    int64_t ranks = 0;
    for (int count : slots) ranks += count;
    DS_RETURN_IF_ERROR(CheckWorldSize(ranks, absl::StrCat("--agents (", hosts.size(), " agent(s))")));
    DS_ASSIGN_OR_RETURN(result.nodes,
                        SelectResources(SyntheticHostfile(hosts, slots, "--agents"), selection));
    result.launcher = LauncherKind::kStatic;
    return result;
  }

  // Note [SLURM]: the allocation's hosts, unless a hostfile is given.
  if (options.launcher == LauncherKind::kSlurm && !options.hostfile_given) {
    if (context.slurm_nodelist.empty()) {
      return absl::InvalidArgumentError(
          "--launcher slurm: SLURM_JOB_NODELIST is not set; run dslaunch inside an allocation (salloc, or an sbatch "
          "script) or give --hostfile");
    }
    DS_ASSIGN_OR_RETURN(std::vector<std::string> hosts,
                        ExpandSlurmHostlist(context.slurm_nodelist, "SLURM_JOB_NODELIST"));
    DS_ASSIGN_OR_RETURN(int gpus, SlurmGpusPerNode(context.slurm_gpus_on_node, context.slurm_gpus_per_node));
    const int slots = options.num_gpus > 0 ? options.num_gpus : std::max(1, gpus);
    ResourceRequest request{options.num_nodes, -1, options.include, options.exclude};
    DS_ASSIGN_OR_RETURN(result.nodes,
                        SelectResources(SyntheticHostfile(hosts, std::vector<int>(hosts.size(), slots),
                                                          "SLURM_JOB_NODELIST"),
                                        request));
    DS_RETURN_IF_ERROR(CheckWorldSize(result.nodes, "SLURM_JOB_NODELIST as selected"));
    result.launcher = LauncherKind::kSlurm;
    return result;
  }
  std::string hostfile_path;
  if (options.hostfile_given) {
    hostfile_path = options.hostfile;
  } else if (context.default_hostfile_exists) {
    hostfile_path = kDefaultHostfile;
  }
  if (!hostfile_path.empty()) {
    DS_ASSIGN_OR_RETURN(Hostfile hostfile, ReadHostfile(hostfile_path));
    ResourceRequest request{options.num_nodes, options.num_gpus, options.include, options.exclude};
    DS_ASSIGN_OR_RETURN(result.nodes, SelectResources(hostfile, request));
    DS_RETURN_IF_ERROR(CheckWorldSize(result.nodes, absl::StrCat("hostfile ", hostfile_path, " as selected")));
    result.hostfile_used = hostfile_path;
    bool all_local = true;
    for (const auto& node : result.nodes) {
      all_local = all_local && IsThisMachine(node.host, context.local_hostname);
    }
    result.launcher = all_local ? LauncherKind::kLocal : LauncherKind::kSsh;
  } else if (!context.cuda_visible_devices.empty() && options.num_nodes <= 1 && options.include.empty() &&
             options.exclude.empty()) {
    // DeepSpeed turns a CUDA_VISIBLE_DEVICES set for the launcher into
    // --include localhost:<devices>; so does dslaunch, and --num_gpus N
    // takes the first N of them.
    DS_ASSIGN_OR_RETURN(std::vector<int> devices, VisibleDeviceSlots(context.cuda_visible_devices));
    if (options.num_gpus > static_cast<int>(devices.size())) {
      return absl::InvalidArgumentError(absl::StrCat("--num_gpus ", options.num_gpus, ": CUDA_VISIBLE_DEVICES='",
                                                     context.cuda_visible_devices, "' lists only ", devices.size(),
                                                     " device(s)"));
    }
    if (options.num_gpus > 0) devices.resize(options.num_gpus);
    result.nodes = {HostSlots{"localhost", devices}};
    result.launcher = LauncherKind::kLocal;
    result.visible_devices_used = true;
    if (options.launcher == LauncherKind::kSsh) {
      return absl::InvalidArgumentError("--launcher ssh (and --force_multi) needs a --hostfile naming the hosts");
    }
  } else {
    int nodes = options.num_nodes > 0 ? options.num_nodes : 1;
    int slots = options.num_gpus > 0 ? options.num_gpus : std::max(1, context.local_gpu_count);
    DS_RETURN_IF_ERROR(CheckWorldSize(static_cast<int64_t>(nodes) * slots,
                                      absl::StrCat("--num_nodes ", nodes, " x --num_gpus ", slots)));
    std::vector<std::string> hosts;
    for (int i = 0; i < nodes; ++i) hosts.push_back(nodes == 1 ? "localhost" : absl::StrCat("node", i));
    DS_ASSIGN_OR_RETURN(result.nodes,
                        SelectResources(SyntheticHostfile(hosts, std::vector<int>(nodes, slots),
                                                          "(local nodes)"),
                                        selection));
    result.launcher = LauncherKind::kLocal;
    if (options.launcher == LauncherKind::kSsh) {
      return absl::InvalidArgumentError("--launcher ssh (and --force_multi) needs a --hostfile naming the hosts");
    }
  }
  if (options.launcher != LauncherKind::kAuto) {
    if (options.launcher == LauncherKind::kStatic) {
      return absl::InvalidArgumentError("--launcher static needs --agents host:port,...");
    }
    result.launcher = options.launcher;
  }
  return result;
}

}  // namespace dslaunch
