#include "common/start_ranks_environment.h"

namespace dslaunch {

std::map<std::string, std::string> StartRanksEnvironment(const StartRanksRequest& request,
                                                         const RankSpec& rank) {
  std::map<std::string, std::string> env(request.common_env().begin(), request.common_env().end());
  for (const auto& [key, value] : rank.env()) env[key] = value;
  return env;
}

}  // namespace dslaunch
