#include "agent/core_binding.h"

#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/core_list.h"

namespace dslaunch {

absl::StatusOr<std::vector<RankCores>> SplitCoresAmongRanks(const std::vector<int>& available, int ranks,
                                                            const std::map<int, std::vector<int>>& nodes,
                                                            const std::string& host) {
  const int per_rank = ranks > 0 ? static_cast<int>(available.size()) / ranks : 0;
  if (per_rank == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--bind_cores_to_rank: host ", host, " has ", available.size(), " core(s) to bind (",
        FormatCoreList(available), ") for ", ranks, " rank(s); give each rank at least one (--bind_core_list, or "
        "fewer ranks per host)"));
  }
  std::vector<RankCores> split(ranks);
  for (int rank = 0; rank < ranks; ++rank) {
    RankCores& mine = split[rank];
    mine.cores.assign(available.begin() + rank * per_rank, available.begin() + (rank + 1) * per_rank);
    for (const auto& entry : nodes) {  // not a structured binding: clang 14 cannot capture one
      const std::vector<int>& cores = entry.second;
      const bool inside = std::all_of(mine.cores.begin(), mine.cores.end(), [&](int core) {
        return std::binary_search(cores.begin(), cores.end(), core);
      });
      if (inside) mine.numa_node = entry.first;
    }
  }
  return split;
}

std::vector<int> AffinityCores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::vector<int> cores;
  if (::sched_getaffinity(0, sizeof(mask), &mask) != 0) return cores;
  for (int core = 0; core < CPU_SETSIZE; ++core) {
    if (CPU_ISSET(core, &mask)) cores.push_back(core);
  }
  return cores;
}

std::map<int, std::vector<int>> NumaNodeCores() {
  std::map<int, std::vector<int>> nodes;
  const std::string root = "/sys/devices/system/node";
  DIR* dir = ::opendir(root.c_str());
  if (dir == nullptr) return nodes;
  while (const dirent* entry = ::readdir(dir)) {
    int node = 0;
    const std::string name = entry->d_name;
    if (name.rfind("node", 0) != 0 || !absl::SimpleAtoi(name.substr(4), &node)) continue;
    std::ifstream in(absl::StrCat(root, "/", name, "/cpulist"));
    std::stringstream text;
    text << in.rdbuf();
    auto cores = ParseCoreList(text.str(), "cpulist");
    if (cores.ok()) nodes[node] = std::move(*cores);  // a node without cores has an empty cpulist
  }
  ::closedir(dir);
  return nodes;
}

}  // namespace dslaunch
