#include "runtime/config/pipeline_chunks.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

absl::StatusOr<VirtualStageCut> VirtualStagesOfBlocks(int64_t blocks, int stages, int per_chunk) {
  const std::string key = absl::StrCat("pipeline.num_layers_per_virtual_stage=", per_chunk);
  if (per_chunk < 1 || stages < 1) {
    return absl::InvalidArgumentError(absl::StrCat(key, " with pipeline.stages=", stages, ": both must be positive"));
  }
  const int64_t chunks = static_cast<int64_t>(stages) * per_chunk;
  if (blocks % chunks != 0) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": the model's ", blocks, " blocks do not split into ",
                                                   stages, " stages x ", per_chunk, " blocks per model chunk"));
  }
  VirtualStageCut cut;
  cut.virtual_stages = static_cast<int>(blocks / chunks);
  if (cut.virtual_stages < 2) {
    return absl::InvalidArgumentError(absl::StrCat(key, " gives one model chunk per stage (", blocks, " blocks over ",
                                                   stages, " stages): that is pipeline.schedule 1f1b"));
  }
  const int parts = stages * cut.virtual_stages;
  cut.layers_per_part.assign(parts, per_chunk);
  cut.layers_per_part.front() += 1;  // the embedding
  cut.layers_per_part.back() += 1;   // the head
  return cut;
}

}  // namespace dslaunch::runtime
