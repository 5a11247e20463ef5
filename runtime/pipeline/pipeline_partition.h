// Cutting a model's layer list into pipeline stages (DeepSpeed's
// partition_method): contiguous runs, one per stage (or per virtual stage
// with an interleaved schedule), every run non-empty.
//
//   parameters   balanced by trainable parameter count (the default)
//   uniform      balanced by layer count
//   type:REGEX   balanced by the number of layers whose type matches REGEX
//                (e.g. type:GptBlock, type:LlamaDecoderLayer); others weigh 0
// or an explicit layers-per-stage list. Balanced means the heaviest run is
// as light as possible; among such cuts the one whose longest run is
// shortest, then the earliest boundaries. Layers that weigh nothing (the
// head under type:) go with their neighbours without tipping the balance.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

struct PipelineLayerInfo {
  std::string name;    // "blocks.3"
  std::string type;    // "GptBlock"
  int64_t parameters;  // trainable elements it owns
};

// Boundaries: parts + 1 layer indices; part p holds [b[p], b[p+1]).
absl::StatusOr<std::vector<int>> PartitionLayers(const std::vector<PipelineLayerInfo>& layers,
                                                 const std::string& method, int parts);
// The same from an explicit count per part (pipeline.layers_per_stage).
absl::StatusOr<std::vector<int>> PartitionByCounts(const std::vector<int>& layers_per_part, int layer_count);

// "stage 0: embedding .. blocks.1 (2 layers, 21,120 parameters)", one line
// per part.
std::vector<std::string> DescribePartition(const std::vector<PipelineLayerInfo>& layers,
                                           const std::vector<int>& boundaries);

}  // namespace dslaunch::runtime
