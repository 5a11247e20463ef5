#include "runtime/generate/generation_ranks.h"

#include "absl/strings/str_cat.h"
#include "common/rank_contract.h"
#include "runtime/generate/generation_model.h"

namespace dslaunch::runtime {

absl::StatusOr<GenerationRanks> StartGenerationRanks(const std::string& device, int64_t local_rank_flag) {
  auto parsed = ParseGenerationDevice(device);
  if (!parsed.ok()) return parsed.status();
  auto env = ReadRankEnvironment();
  if (!env.ok()) return env.status();
  if (local_rank_flag >= 0 && local_rank_flag != env->local_rank) {
    return absl::InvalidArgumentError(absl::StrCat("--local_rank ", local_rank_flag, " but LOCAL_RANK is ",
                                                   env->local_rank));
  }
  GenerationRanks ranks;
  ranks.device = device;
  ranks.rank = env->rank;
  ranks.world_size = env->world_size;
  if (env->world_size == 1) return ranks;
  RankOptions options;
  options.device = parsed->is_cuda() ? RankOptions::DeviceChoice::kCuda : RankOptions::DeviceChoice::kCpu;
  options.parallel.tensor = env->world_size;
  auto started = StartRank(*env, options);
  if (!started.ok()) return started.status();
  ranks.runtime = std::move(*started);
  Communicator* group = ranks.runtime->parallel()->tensor();
  ranks.tensor_parallel = TensorParallelGroup{group, group->rank(), group->size(), false};
  ranks.device = ranks.runtime->device().str();
  return ranks;
}

}  // namespace dslaunch::runtime
