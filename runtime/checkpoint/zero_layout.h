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

// A partition's parameters as a rank file records them: names in the flat
// vector's order and their (local) shapes.
struct SavedLayout {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
};
// Reads `prefix`names ("a\nb") and `prefix`shapes ("2,3;4") ("layout/" for
// the dense partition, "experts/" for the experts'). DataLoss naming `file`
// when a key is missing, a shape is malformed, or the counts differ.
absl::StatusOr<SavedLayout> ReadSavedLayout(torch::serialize::InputArchive& archive, const std::string& prefix,
                                            const std::string& file);

}  // namespace dslaunch::runtime
