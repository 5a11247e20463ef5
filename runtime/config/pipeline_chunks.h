// Megatron's num_layers_per_virtual_pipeline_stage (pipeline.
// num_layers_per_virtual_stage): how many model chunks per pipeline stage
// the interleaved schedule runs, from the model's depth. Checked where the
// job is loaded when model.layers says the depth, and by the ranks
// (runtime/pipeline) once a model.from folder's depth is known.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

// Megatron's num_layers_per_virtual_pipeline_stage: a model of `blocks`
// blocks (its layer list is the embedding, the blocks, the head) cut into
// stages · v model chunks of `per_chunk` blocks each, v = blocks / (stages ·
// per_chunk), the embedding joining the first chunk and the head the last.
// InvalidArgument naming pipeline.num_layers_per_virtual_stage when the
// blocks do not divide, or when v would be 1 (that is 1F1B's cut).
struct VirtualStageCut {
  int virtual_stages = 1;
  std::vector<int> layers_per_part;  // stages · v entries, as pipeline.layers_per_stage
};
absl::StatusOr<VirtualStageCut> VirtualStagesOfBlocks(int64_t blocks, int stages, int per_chunk);

}  // namespace dslaunch::runtime
