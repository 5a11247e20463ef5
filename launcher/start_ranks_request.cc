#include "launcher/start_ranks_request.h"

namespace dslaunch {

std::vector<StartRanksRequest> BuildStartRanksRequests(const LaunchPlan& plan,
                                                       const RankEnvironmentInputs& environment,
                                                       const RankProgram& program) {
  std::vector<StartRanksRequest> requests(plan.nodes.size());
  for (size_t node = 0; node < plan.nodes.size(); ++node) {
    for (auto& [key, value] : BuildNodeEnvironment(plan, static_cast<int>(node), environment)) {
      (*requests[node].mutable_common_env())[key] = std::move(value);
    }
  }
  for (const RankPlacement& rank : plan.ranks) {
    RankSpec* spec = requests[rank.node_index].add_ranks();
    spec->set_global_rank(rank.global_rank);
    spec->set_local_rank(rank.local_rank);
    for (auto& arg : BuildRankArgv(program.argv, rank, program.no_local_rank)) spec->add_argv(std::move(arg));
    for (auto& [key, value] : BuildRankOwnEnvironment(rank)) (*spec->mutable_env())[key] = std::move(value);
    spec->set_working_dir(program.working_dir);
  }
  return requests;
}

}  // namespace dslaunch
