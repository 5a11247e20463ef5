#include "launcher/launch_plan.h"

#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bounded_file.h"
#include "common/rank_contract.h"

namespace dslaunch {

std::string LaunchPlan::VisibleDevices(int node_index) const {
  return absl::StrJoin(nodes[node_index].slots, ",");
}

std::vector<int> LaunchPlan::RanksOfNode(int node_index) const {
  std::vector<int> result;
  for (const auto& rank : ranks) {
    if (rank.node_index == node_index) result.push_back(rank.global_rank);
  }
  return result;
}

LaunchPlan BuildLaunchPlan(std::vector<HostSlots> nodes) {
  LaunchPlan plan;
  plan.nodes = std::move(nodes);
  for (int node = 0; node < static_cast<int>(plan.nodes.size()); ++node) {
    const auto& slots = plan.nodes[node].slots;
    for (int local = 0; local < static_cast<int>(slots.size()); ++local) {
      RankPlacement rank;
      rank.global_rank = plan.world_size();
      rank.node_index = node;
      rank.local_rank = local;
      rank.local_world_size = static_cast<int>(slots.size());
      rank.device = slots[local];
      plan.ranks.push_back(rank);
    }
  }
  return plan;
}

std::map<std::string, std::string> BuildNodeEnvironment(const LaunchPlan& plan, int node_index,
                                                        const RankEnvironmentInputs& inputs) {
  std::map<std::string, std::string> env = inputs.passthrough;
  if (!env.count(rank_env::kOmpNumThreads)) env[rank_env::kOmpNumThreads] = "1";
  const std::string world = absl::StrCat(plan.world_size());
  const std::string local_world = absl::StrCat(plan.nodes[node_index].slots.size());
  const std::string nodes = absl::StrCat(plan.nodes.size());
  const std::string node = absl::StrCat(node_index);
  // torchrun's contract (RANK, LOCAL_RANK and ROLE_RANK: BuildRankOwnEnvironment).
  env[rank_env::kWorldSize] = world;
  env[rank_env::kLocalWorldSize] = local_world;
  env[rank_env::kGroupRank] = node;
  env[rank_env::kGroupWorldSize] = nodes;
  env[rank_env::kRoleWorldSize] = world;
  env[rank_env::kRoleName] = "default";
  env[rank_env::kMasterAddr] = inputs.master_addr;
  env[rank_env::kMasterPort] = absl::StrCat(inputs.master_port);
  env[rank_env::kRestartCount] = absl::StrCat(inputs.attempt);
  env[rank_env::kMaxRestarts] = absl::StrCat(inputs.max_restarts);
  env[rank_env::kRunId] = inputs.job_id;
  // DeepSpeed's additions.
  env[rank_env::kCrossRank] = node;
  env[rank_env::kCrossSize] = nodes;
  env[rank_env::kLocalSize] = local_world;
  env[rank_env::kCudaVisibleDevices] = plan.VisibleDevices(node_index);
  // Ours: Note [Rank environment contract].
  env[rank_env::kJobId] = inputs.job_id;
  env[rank_env::kAttempt] = absl::StrCat(inputs.attempt);
  env[rank_env::kStoreAddr] = inputs.store_addr;
  env[rank_env::kStoreToken] = inputs.store_token;
  env[rank_env::kEnvVersionName] = absl::StrCat(rank_env::kEnvVersion);
  return env;
}

std::map<std::string, std::string> BuildRankOwnEnvironment(const RankPlacement& rank) {
  const std::string global = absl::StrCat(rank.global_rank);
  return {{rank_env::kRank, global}, {rank_env::kLocalRank, absl::StrCat(rank.local_rank)}, {rank_env::kRoleRank, global}};
}

std::map<std::string, std::string> BuildRankEnvironment(const LaunchPlan& plan,
                                                        const RankPlacement& rank,
                                                        const RankEnvironmentInputs& inputs) {
  std::map<std::string, std::string> env = BuildNodeEnvironment(plan, rank.node_index, inputs);
  for (auto& [key, value] : BuildRankOwnEnvironment(rank)) env[key] = std::move(value);
  return env;
}

size_t ScriptArgumentsStart(const std::vector<std::string>& program) {
  if (program.empty()) return 0;
  const std::string& first = program.front();
  const std::string base = first.substr(first.rfind('/') == std::string::npos ? 0 : first.rfind('/') + 1);
  if (!absl::StartsWith(base, "python")) return 1;
  // The interpreter's own options come first; the script (or -m MODULE, or
  // -c CODE) ends them.
  size_t i = 1;
  while (i < program.size()) {
    const std::string& arg = program[i];
    if (arg == "-m" || arg == "-c") return std::min(i + 2, program.size());
    if (arg == "-W" || arg == "-X") {
      i += 2;
      continue;
    }
    if (arg == "--") return std::min(i + 2, program.size());
    if (!absl::StartsWith(arg, "-") || arg == "-") return i + 1;
    ++i;
  }
  return program.size();
}

std::vector<std::string> BuildRankArgv(const std::vector<std::string>& program,
                                       const RankPlacement& rank, bool no_local_rank) {
  std::vector<std::string> argv = program;
  if (!no_local_rank) {
    argv.insert(argv.begin() + static_cast<std::ptrdiff_t>(ScriptArgumentsStart(program)),
                absl::StrCat("--local_rank=", rank.local_rank));
  }
  return argv;
}

std::map<std::string, std::string> SelectPassthroughVariables(char** environ) {
  static constexpr const char* kPrefixes[] = {"NCCL", "PYTHON", "MLFLOW", "MV2", "UCX"};
  std::map<std::string, std::string> result;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    absl::string_view text(*entry);
    size_t eq = text.find('=');
    if (eq == absl::string_view::npos) continue;
    absl::string_view name = text.substr(0, eq);
    bool pass = name == "OMP_NUM_THREADS" || name == "CUDA_DEVICE_MAX_CONNECTIONS";
    for (const char* prefix : kPrefixes) pass = pass || absl::StartsWith(name, prefix);
    if (pass) result[std::string(name)] = std::string(text.substr(eq + 1));
  }
  return result;
}

absl::Status ReadDeepspeedEnvFile(const std::string& path,
                                  std::map<std::string, std::string>* out) {
  // Note [Bounded input files]: only a missing file is skipped; a FIFO, a
  // device, a directory or an unreadable file is an error naming it.
  absl::StatusOr<std::string> content = ReadConfigFile(path, ".deepspeed_env file");
  if (absl::IsNotFound(content.status())) return absl::OkStatus();
  if (!content.ok()) return content.status();
  std::istringstream in(*content);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    size_t eq = text.find('=');
    absl::string_view name = eq == absl::string_view::npos ? text : text.substr(0, eq);
    bool valid_name = !name.empty() && !absl::ascii_isdigit(name[0]);
    for (char c : name) valid_name = valid_name && (absl::ascii_isalnum(c) || c == '_');
    if (eq == absl::string_view::npos || !valid_name) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", number, ": '", text, "': expected NAME=VALUE"));
    }
    (*out)[std::string(name)] = std::string(text.substr(eq + 1));
  }
  return absl::OkStatus();
}

}  // namespace dslaunch
