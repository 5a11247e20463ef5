// How dsgen and dsserve start as ranks (Note [Tensor-parallel generation]):
// alone, one process on --device; started by dslaunch with N ranks, the one
// rank bootstrap (runtime/api/rank_bootstrap.h: device, process groups,
// heartbeats) with the model split over all N as tensor parallelism.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/api/rank_bootstrap.h"
#include "runtime/tensor_parallel/tensor_parallel_group.h"

namespace dslaunch::runtime {

struct GenerationRanks {
  std::unique_ptr<RankRuntime> runtime;  // null for one process
  TensorParallelGroup tensor_parallel;   // the whole world, or one member
  std::string device;                    // this rank's: "cpu", "cuda:1", ...
  int rank = 0;
  int world_size = 1;
};

// `device` is --device; `local_rank_flag` is --local_rank (< 0: not given),
// which dslaunch passes as DeepSpeed's launcher does and must match
// LOCAL_RANK. Errors name the flag or the environment variable.
absl::StatusOr<GenerationRanks> StartGenerationRanks(const std::string& device, int64_t local_rank_flag);

}  // namespace dslaunch::runtime
