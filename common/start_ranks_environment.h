// What a StartRanks request puts in one rank's environment (proto/agent.proto):
// the request's common_env, overridden by the rank's own env. The agent adds
// the result to its own environment; defined once here for the agent and the
// controller tests' fake agent.
#pragma once

#include <map>
#include <string>

#include "proto/agent.pb.h"

namespace dslaunch {

std::map<std::string, std::string> StartRanksEnvironment(const StartRanksRequest& request,
                                                         const RankSpec& rank);

}  // namespace dslaunch
