// The Llama family's layout (Note [Model interface]): its layer list, tied
// parameters and tensor-parallel forms, by Hugging Face parameter name.
#include "absl/strings/str_cat.h"
#include "runtime/model/llama.h"
#include "runtime/model/lora.h"

namespace dslaunch::runtime {

std::vector<ModelLayer> LlamaImpl::Layers() const {
  std::vector<ModelLayer> layers;
  layers.push_back(ModelLayer{"embedding", "Embedding", ParameterNamesUnder(*model->embed_tokens, "model.embed_tokens.")});
  for (size_t i = 0; i < model->layers->size(); ++i) {
    layers.push_back(ModelLayer{absl::StrCat("layers.", i), "LlamaDecoderLayer",
                                ParameterNamesUnder(*model->layers->ptr(i), absl::StrCat("model.layers.", i, "."))});
  }
  ModelLayer head{"head", "Head", ParameterNamesUnder(*model->norm, "model.norm.")};
  if (lm_head) {
    for (std::string& name : ParameterNamesUnder(*lm_head, "lm_head.")) head.parameters.push_back(std::move(name));
  }
  layers.push_back(std::move(head));
  return layers;
}

std::vector<TiedParameter> LlamaImpl::TiedParameters() const {
  if (!options_.tie_word_embeddings) return {};
  return {TiedParameter{"model.embed_tokens.weight", {"embedding", "head"}}};
}

std::vector<TensorParallelForm> LlamaImpl::TensorParallelForms() const {
  const int slices = std::max(1, options_.tensor_parallel.size);
  const TensorParallelForm vocab{"model.embed_tokens.weight", TensorParallelSplit::kVocab, 1, options_.vocab_size,
                                 LocalVocabRows(options_) * slices};
  std::vector<TensorParallelForm> forms = {vocab};
  // With fewer key/value heads than ranks, k_proj and v_proj are whole on
  // every rank (KeyValueHeadsReplicated).
  std::vector<const char*> split_projections = {"q_proj"};
  if (!KeyValueHeadsReplicated(options_)) split_projections = {"q_proj", "k_proj", "v_proj"};
  for (size_t i = 0; i < model->layers->size(); ++i) {
    const std::string layer = absl::StrCat("model.layers.", i, ".");
    for (const char* projection : split_projections) {
      forms.push_back({absl::StrCat(layer, "self_attn.", projection, ".weight"), TensorParallelSplit::kColumn});
      if (options_.qkv_bias) {
        forms.push_back({absl::StrCat(layer, "self_attn.", projection, ".bias"), TensorParallelSplit::kColumn});
      }
    }
    forms.push_back({layer + "self_attn.o_proj.weight", TensorParallelSplit::kRow});
    if (options_.moe.IsExpertBlock(static_cast<int64_t>(i))) continue;  // never split (refused with TP)
    for (const char* projection : {"gate_proj", "up_proj"}) {
      forms.push_back({absl::StrCat(layer, "mlp.", projection, ".weight"), TensorParallelSplit::kColumn});
      if (options_.mlp_bias) {
        forms.push_back({absl::StrCat(layer, "mlp.", projection, ".bias"), TensorParallelSplit::kColumn});
      }
    }
    forms.push_back({layer + "mlp.down_proj.weight", TensorParallelSplit::kRow});
  }
  // The output head split by vocabulary, like the embedding.
  if (lm_head) {
    TensorParallelForm head = vocab;
    head.parameter = "lm_head.weight";
    forms.push_back(head);
  }
  // The adapters' split factors (Note [LoRA under tensor parallelism]);
  // unsplit, an adapter on the output head is an ordinary projection's.
  if (slices > 1) {
    absl::StatusOr<std::vector<TensorParallelForm>> adapters = LoraAdapterForms(*this, forms);
    TORCH_CHECK(adapters.ok(), std::string(adapters.status().message()));
    forms.insert(forms.end(), adapters->begin(), adapters->end());
  }
  return forms;
}

std::vector<int64_t> LlamaImpl::ActivationShape(const TokenBatch& batch) const {
  // Under sequence parallelism each rank holds its share of the time steps.
  const TensorParallelGroup& group = options_.tensor_parallel;
  const int64_t time = batch.tokens.size(1);
  return {batch.tokens.size(0), group.split() && group.sequence_parallel ? time / group.size : time, options_.hidden};
}

}  // namespace dslaunch::runtime
