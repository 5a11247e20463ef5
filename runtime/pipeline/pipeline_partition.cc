#include "runtime/pipeline/pipeline_partition.h"

#include <algorithm>
#include <limits>
#include <regex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dslaunch::runtime {
namespace {

// Minimises (heaviest part, longest part) lexicographically over contiguous
// cuts into `parts` non-empty runs: O(n² · parts), n is a few hundred at most.
std::vector<int> BalancedBoundaries(const std::vector<int64_t>& weights, int parts) {
  const int n = static_cast<int>(weights.size());
  std::vector<int64_t> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + weights[i];
  using Cost = std::pair<int64_t, int>;
  const Cost kNone{std::numeric_limits<int64_t>::max(), std::numeric_limits<int>::max()};
  // best[k][i]: the first i layers in k parts; from[k][i]: where part k starts.
  std::vector<std::vector<Cost>> best(parts + 1, std::vector<Cost>(n + 1, kNone));
  std::vector<std::vector<int>> from(parts + 1, std::vector<int>(n + 1, -1));
  best[0][0] = {0, 0};
  for (int k = 1; k <= parts; ++k) {
    for (int i = k; i <= n - (parts - k); ++i) {
      for (int j = k - 1; j < i; ++j) {
        if (best[k - 1][j] == kNone) continue;
        const Cost candidate{std::max(best[k - 1][j].first, prefix[i] - prefix[j]),
                             std::max(best[k - 1][j].second, i - j)};
        if (candidate < best[k][i]) {
          best[k][i] = candidate;
          from[k][i] = j;
        }
      }
    }
  }
  std::vector<int> boundaries(parts + 1, n);
  for (int k = parts, i = n; k > 0; --k) {
    i = from[k][i];
    boundaries[k - 1] = i;
  }
  return boundaries;
}

}  // namespace

absl::StatusOr<std::vector<int>> PartitionLayers(const std::vector<PipelineLayerInfo>& layers,
                                                 const std::string& method, int parts) {
  const int n = static_cast<int>(layers.size());
  if (parts < 1 || parts > n) {
    return absl::InvalidArgumentError(absl::StrCat("the model has ", n, " layers (embedding, blocks, head), too few for ",
                                                   parts, " pipeline stages: each stage needs at least one"));
  }
  std::vector<int64_t> weights;
  if (method == "parameters") {
    for (const PipelineLayerInfo& layer : layers) weights.push_back(layer.parameters);
  } else if (method == "uniform") {
    weights.assign(n, 1);
  } else if (absl::StartsWith(method, "type:")) {
    const std::string pattern = method.substr(5);
    std::regex type;
    try {
      type = std::regex(pattern, std::regex::icase);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("pipeline.partition_method=\"", method, "\": not a regular expression: ", e.what()));
    }
    int matching = 0;
    for (const PipelineLayerInfo& layer : layers) {
      const bool match = std::regex_search(layer.type, type);
      weights.push_back(match ? 1 : 0);
      matching += match ? 1 : 0;
    }
    if (matching < parts) {
      std::vector<std::string> types;
      for (const PipelineLayerInfo& layer : layers) {
        if (std::find(types.begin(), types.end(), layer.type) == types.end()) types.push_back(layer.type);
      }
      return absl::InvalidArgumentError(absl::StrCat("pipeline.partition_method=\"", method, "\" matches ", matching,
                                                     " layers, fewer than the ", parts,
                                                     " stages; the layer types are ", absl::StrJoin(types, ", ")));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat("pipeline.partition_method=\"", method,
                                                   "\": use \"parameters\", \"uniform\" or \"type:REGEX\""));
  }
  return BalancedBoundaries(weights, parts);
}

absl::StatusOr<std::vector<int>> PartitionByCounts(const std::vector<int>& layers_per_part, int layer_count) {
  std::vector<int> boundaries{0};
  for (size_t p = 0; p < layers_per_part.size(); ++p) {
    if (layers_per_part[p] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("pipeline.layers_per_stage[", p, "]=", layers_per_part[p],
                                                     ": every stage needs at least one layer"));
    }
    boundaries.push_back(boundaries.back() + layers_per_part[p]);
  }
  if (boundaries.back() != layer_count) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline.layers_per_stage adds up to ", boundaries.back(),
                                                   " layers; the model has ", layer_count,
                                                   " (the embedding, each block, the head)"));
  }
  return boundaries;
}

std::vector<std::string> DescribePartition(const std::vector<PipelineLayerInfo>& layers,
                                           const std::vector<int>& boundaries) {
  std::vector<std::string> lines;
  for (size_t p = 0; p + 1 < boundaries.size(); ++p) {
    const int begin = boundaries[p], end = boundaries[p + 1];
    int64_t parameters = 0;
    for (int i = begin; i < end; ++i) parameters += layers[i].parameters;
    lines.push_back(absl::StrCat("stage ", p, ": ", layers[begin].name, end - begin > 1 ? " .. " : "",
                                 end - begin > 1 ? layers[end - 1].name : "", " (", end - begin, " layers, ",
                                 parameters, " parameters)"));
  }
  return lines;
}

}  // namespace dslaunch::runtime
