#include "runtime/model/model_interface.h"

#include <algorithm>
#include <map>

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

void InitializeSlices(torch::nn::Module& module, const std::vector<TensorParallelForm>& forms,
                      const TensorParallelGroup& group,
                      const std::function<void(const std::string& name, torch::Tensor& whole)>& fill) {
  torch::NoGradGuard no_grad;
  std::map<std::string, const TensorParallelForm*> form_of;
  for (const TensorParallelForm& form : forms) form_of[form.parameter] = &form;
  for (auto& item : module.named_parameters()) {
    torch::Tensor& p = item.value();
    auto it = form_of.find(item.key());
    if (it == form_of.end()) {
      torch::Tensor whole = torch::empty(p.sizes(), torch::kFloat);
      fill(item.key(), whole);
      p.copy_(whole);
      continue;
    }
    const TensorParallelForm& form = *it->second;
    std::vector<int64_t> shape = p.sizes().vec();
    const int64_t dim = SplitDimension(form);
    shape[dim] = form.split == TensorParallelSplit::kVocab ? form.vocab_size : shape[dim] * std::max(1, group.size);
    torch::Tensor whole = torch::empty(shape, torch::kFloat);
    fill(item.key(), whole);
    auto mine = SliceForRank(whole, form, group.rank, std::max(1, group.size));
    TORCH_CHECK(mine.ok(), mine.status().ToString());
    p.copy_(*mine);
  }
}

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters()) count += p.numel();
  return count;
}

}  // namespace dslaunch::runtime
