// The GPT as a model family (Note [Model interface]): its layer list, tied
// parameters and tensor-parallel forms, by parameter name.
#include "absl/strings/str_cat.h"
#include "runtime/model/gpt.h"

namespace dslaunch::runtime {

std::vector<ModelLayer> GptImpl::Layers() const {
  std::vector<ModelLayer> layers;
  ModelLayer embedding{"embedding", "Embedding", ParameterNamesUnder(*token_embedding, "token_embedding.")};
  for (std::string& name : ParameterNamesUnder(*position_embedding, "position_embedding.")) {
    embedding.parameters.push_back(std::move(name));
  }
  layers.push_back(std::move(embedding));
  for (size_t i = 0; i < blocks->size(); ++i) {
    const std::string name = absl::StrCat("blocks.", i);
    layers.push_back(ModelLayer{name, "GptBlock", ParameterNamesUnder(*blocks->ptr(i), name + ".")});
  }
  layers.push_back(ModelLayer{"head", "Head", ParameterNamesUnder(*final_norm, "final_norm.")});
  return layers;
}

std::vector<TiedParameter> GptImpl::TiedParameters() const {
  return {TiedParameter{"token_embedding.weight", {"embedding", "head"}}};
}

std::vector<TensorParallelForm> GptImpl::TensorParallelForms() const {
  const int slices = std::max(1, options_.tensor_parallel.size);
  std::vector<TensorParallelForm> forms = {
      {"token_embedding.weight", TensorParallelSplit::kVocab, 1, options_.vocab_size, LocalVocabRows(options_) * slices}};
  for (size_t i = 0; i < blocks->size(); ++i) {
    const std::string block = absl::StrCat("blocks.", i, ".");
    forms.push_back({block + "attention.qkv.weight", TensorParallelSplit::kColumn, 3});
    forms.push_back({block + "attention.qkv.bias", TensorParallelSplit::kColumn, 3});
    forms.push_back({block + "attention.projection.weight", TensorParallelSplit::kRow});
    if (options_.moe.IsExpertBlock(static_cast<int64_t>(i))) continue;  // never split (refused with TP)
    forms.push_back({block + "fc.weight", TensorParallelSplit::kColumn});
    forms.push_back({block + "fc.bias", TensorParallelSplit::kColumn});
    forms.push_back({block + "fc_projection.weight", TensorParallelSplit::kRow});
  }
  return forms;
}

std::vector<int64_t> GptImpl::ActivationShape(const TokenBatch& batch) const {
  // Under sequence parallelism each rank holds its share of the time steps.
  const TensorParallelGroup& group = options_.tensor_parallel;
  const int64_t time = batch.tokens.size(1);
  return {batch.tokens.size(0), group.split() && group.sequence_parallel ? time / group.size : time, options_.width};
}

}  // namespace dslaunch::runtime
