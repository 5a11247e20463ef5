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
                      const TensorParallelGroup& group, const ParameterFill& fill) {
  torch::NoGradGuard no_grad;
  std::map<std::string, const TensorParallelForm*> form_of;
  for (const TensorParallelForm& form : forms) form_of[form.parameter] = &form;
  for (auto& item : module.named_parameters()) {
    torch::Tensor& p = item.value();
    auto it = form_of.find(item.key());
    const TensorParallelForm* form = it == form_of.end() ? nullptr : it->second;
    torch::Tensor whole = torch::empty(UnsplitShape(p.sizes().vec(), form, group.size), torch::kFloat);
    fill(item.key(), whole);
    if (form == nullptr) {
      p.copy_(whole);
      continue;
    }
    auto mine = SliceForRank(whole, *form, group.rank, std::max(1, group.size));
    TORCH_CHECK(mine.ok(), mine.status().ToString());
    p.copy_(*mine);
  }
}

std::vector<int64_t> UnsplitShape(std::vector<int64_t> local, const TensorParallelForm* form, int size) {
  if (form == nullptr) return local;
  const int64_t dim = SplitDimension(*form);
  if (static_cast<int64_t>(local.size()) <= dim) return local;
  local[dim] = form->split == TensorParallelSplit::kVocab ? form->vocab_size : local[dim] * std::max(1, size);
  return local;
}

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters()) count += p.numel();
  return count;
}

}  // namespace dslaunch::runtime
