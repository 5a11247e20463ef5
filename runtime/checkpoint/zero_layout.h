// How a ZeRO checkpoint's shards map back to the flat parameter vector:
// every rank file holds the rank's pieces of each unit (one unit before
// stage 3), each unit cut into `zero/shards` pieces of ceil(Ψ_u / shards)
// elements (Note [ZeRO partitioning]).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

// Ψ_u of every unit as the checkpoint recorded them ("zero/unit_sizes"; a
// file without the key holds one unit of `total` elements). DataLoss when
// they do not add up to `total`.
// `prefix`: the partition's keys ("experts/" for the experts' partition).
absl::StatusOr<std::vector<int64_t>> SavedUnitSizes(torch::serialize::InputArchive& archive, int64_t total,
                                                    const std::string& prefix = "zero/");

}  // namespace dslaunch::runtime
