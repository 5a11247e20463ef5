#include "runtime/model/model_interface.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

std::vector<std::string> ParameterNamesUnder(const torch::nn::Module& module, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters()) names.push_back(absl::StrCat(prefix, item.key()));
  return names;
}

bool IsCheckpointedLayer(int64_t layer, int64_t checkpointed, int64_t layers) {
  const int64_t k = std::min(checkpointed, layers);
  if (k <= 0) return false;
  return (layer + 1) * k / layers != layer * k / layers;
}

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters()) count += p.numel();
  return count;
}

}  // namespace dslaunch::runtime
