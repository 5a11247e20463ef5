// The StartRanks request of every node of a launch plan, one per node: the
// environment its ranks share once (common_env), and per rank its placement,
// argv and the few variables that are its own (Note [Environment once per
// node] in launcher/launch_plan.h). The caller adds the job id, attempt and
// lease. Pure: no I/O.
#pragma once

#include <string>
#include <vector>

#include "launcher/launch_plan.h"
#include "proto/agent.pb.h"

namespace dslaunch {

// What every rank runs: PROGRAM ARGS... (plus --local_rank=N unless
// no_local_rank) in working_dir.
struct RankProgram {
  std::vector<std::string> argv;
  bool no_local_rank = false;
  std::string working_dir;
};

// Indexed like plan.nodes.
std::vector<StartRanksRequest> BuildStartRanksRequests(const LaunchPlan& plan,
                                                       const RankEnvironmentInputs& environment,
                                                       const RankProgram& program);

}  // namespace dslaunch
