#include "launcher/dry_run.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "common/rank_contract.h"
#include "runtime/topology/process_topology.h"

namespace dslaunch {
namespace {

void PrintVariables(const std::map<std::string, std::string>& env, const JobSpec& spec,
                    std::FILE* out) {
  const LaunchPlan& plan = spec.plan;
  for (const auto& [key, value] : env) {
    std::string shown = value;
    if (key == rank_env::kMasterPort && spec.environment.master_port == 0) {
      shown = absl::StrCat("(a free port picked at launch by the agent of ",
                           plan.nodes[plan.ranks[0].node_index].host, ")");
    } else if (key == rank_env::kStoreAddr) {
      shown = "(the controller's store, bound at launch)";
    } else if (key == rank_env::kStoreToken) {
      shown = "(generated at launch)";
    }
    std::fprintf(out, "  %s=%s\n", key.c_str(), shown.c_str());
  }
}

// ", (pipe, data, model) = (p, d, m)" in DeepSpeed's grid when the job has
// tensor or pipeline parallelism (runtime/topology), or nothing.
std::string GridCoordinates(const JobSpec& spec, int rank) {
  const int world = spec.plan.world_size();
  const int tp = spec.tensor_parallel_size, pp = spec.pipeline_stages;
  if (tp * pp == 1 || world % (tp * pp) != 0) return "";
  auto topology = runtime::ProcessTopology::Create(pp, world / (tp * pp), tp);
  if (!topology.ok()) return "";
  const runtime::ProcessCoord c = topology->Coordinate(rank);
  return absl::StrCat(", (pipe, data, model) = (", c.pipe, ", ", c.data, ", ", c.model, ")");
}

}  // namespace

void PrintDryRun(const JobSpec& spec, LauncherKind launcher, std::FILE* out) {
  const LaunchPlan& plan = spec.plan;
  const char* kinds[] = {"auto", "local", "ssh", "static", "slurm"};
  std::fprintf(out, "dslaunch dry run: job %s, %d rank(s) on %zu node(s), launcher %s\n",
               spec.job_id.c_str(), plan.world_size(), plan.nodes.size(),
               kinds[static_cast<int>(launcher)]);
  if (!spec.pipeline_partition.empty()) {
    std::fprintf(out, "pipeline: %d stages; the layers of each (virtual) stage:\n", spec.pipeline_stages);
    for (const std::string& line : spec.pipeline_partition) std::fprintf(out, "  %s\n", line.c_str());
  }
  for (int node = 0; node < static_cast<int>(plan.nodes.size()); ++node) {
    std::fprintf(out,
                 "node %d: host %s, %zu rank(s); the environment they share (each rank below "
                 "adds its own):\n",
                 node, plan.nodes[node].host.c_str(), plan.nodes[node].slots.size());
    PrintVariables(BuildNodeEnvironment(plan, node, spec.environment), spec, out);
  }
  for (const RankPlacement& rank : plan.ranks) {
    const std::string& host = plan.nodes[rank.node_index].host;
    std::fprintf(out, "rank %d: host %s, local rank %d of %d, device %d%s\n", rank.global_rank,
                 host.c_str(), rank.local_rank, rank.local_world_size, rank.device,
                 GridCoordinates(spec, rank.global_rank).c_str());
    std::fprintf(out, "  argv: %s\n",
                 absl::StrJoin(BuildRankArgv(spec.program, rank, spec.no_local_rank), " ").c_str());
    PrintVariables(BuildRankOwnEnvironment(rank), spec, out);
  }
}

}  // namespace dslaunch
