#include "launcher/node_resolution.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
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

absl::StatusOr<NodeResolution> ResolveNodes(const LauncherOptions& options,
                                            const NodeResolutionContext& context) {
  NodeResolution result;
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
      return absl::InvalidArgumentError("--launcher ssh needs a --hostfile naming the hosts");
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
