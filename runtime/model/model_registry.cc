#include "runtime/model/model_registry.h"

#include <algorithm>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/model/gpt.h"
#include "runtime/model/llama.h"
#include "runtime/model/llama_hf_config.h"

namespace dslaunch::runtime {
namespace {

using Builder = std::function<absl::StatusOr<BuiltModel>(const ModelSpec&, uint64_t seed)>;

absl::StatusOr<BuiltModel> BuildGpt(const ModelSpec& spec, uint64_t seed) {
  GptOptions options;
  options.layers = spec.layers;
  options.heads = spec.heads;
  options.width = spec.width;
  options.sequence_length = spec.sequence_length;
  options.vocab_size = spec.vocab_size;
  options.dropout = spec.dropout;
  options.checkpointed_blocks = spec.checkpointed_blocks;
  options.checkpoint_to_cpu = spec.checkpoint_to_cpu;
  options.partition_checkpoints = spec.partition_checkpoints;
  options.fused_kernels = spec.fused_kernels;
  options.tensor_parallel = spec.tensor_parallel;
  options.vocab_divisor = spec.vocab_divisor;
  options.label_smoothing = spec.label_smoothing;
  options.moe = spec.moe;
  options.deferred = spec.deferred_parameters;
  auto gpt = std::make_shared<GptImpl>(options, seed);
  return BuiltModel{gpt, gpt.get()};
}

// From a config.json when the spec has one; else a Llama of the spec's sizes
// (SwiGLU width 8/3 of the model's, rounded up to a multiple of 32, as
// Llama's own sizes are).
absl::StatusOr<BuiltModel> BuildLlama(const ModelSpec& spec, uint64_t seed) {
  LlamaHfConfig hf;
  LlamaOptions& options = hf.options;
  if (!spec.hf_config_text.empty()) {
    auto config = ParseLlamaHfConfig(spec.hf_config_text, spec.hf_config_path);
    if (!config.ok()) return config.status();
    hf = *config;
    if (spec.vocab_size > config->options.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(spec.hf_config_path, ": vocab_size ", options.vocab_size,
                                                     " is smaller than the data's vocabulary (", spec.vocab_size,
                                                     ")"));
    }
  } else {
    options.layers = spec.layers;
    options.hidden = spec.width;
    options.heads = spec.heads;
    options.kv_heads = spec.heads;
    options.head_dim = spec.heads > 0 ? spec.width / spec.heads : 0;
    options.intermediate = (8 * spec.width / 3 + 31) / 32 * 32;
    options.vocab_size = spec.vocab_size;
    options.rope.max_position_embeddings = spec.sequence_length;
    options.rope.head_dim = options.head_dim;
    hf.max_position_embeddings = spec.sequence_length;
  }
  options.checkpointed_blocks = spec.checkpointed_blocks;
  options.checkpoint_to_cpu = spec.checkpoint_to_cpu;
  options.partition_checkpoints = spec.partition_checkpoints;
  options.fused_kernels = spec.fused_kernels;
  options.tensor_parallel = spec.tensor_parallel;
  options.vocab_divisor = spec.vocab_divisor;
  options.label_smoothing = spec.label_smoothing;
  // A Mixtral folder brings its experts (options.moe from its config.json);
  // model.moe describes them otherwise. The expert group is the rank's.
  if (spec.moe.enabled()) options.moe = spec.moe;
  options.moe.expert_parallel = spec.moe.expert_parallel;
  options.deferred = spec.deferred_parameters;
  auto llama = std::make_shared<LlamaImpl>(options, seed);
  return BuiltModel{llama, llama.get(),
                    [hf](const std::string& torch_dtype) { return LlamaHfConfigJson(hf, torch_dtype); }};
}

// One line per family.
const std::map<std::string, Builder>& Families() {
  static const auto* const families = new std::map<std::string, Builder>{
      {"gpt", BuildGpt},
      {"llama", BuildLlama},
  };
  return *families;
}

}  // namespace

absl::StatusOr<BuiltModel> BuildModel(const ModelSpec& spec, uint64_t seed) {
  auto it = Families().find(spec.type);
  if (it == Families().end()) {
    return absl::InvalidArgumentError(absl::StrCat("model.type '", spec.type, "' is not a model family this runtime has (",
                                                   absl::StrJoin(ModelFamilies(), ", "), ")"));
  }
  try {
    return it->second(spec, seed);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("model.type '", spec.type, "': ", e.what_without_backtrace()));
  }
}

std::vector<std::string> ModelFamilies() {
  std::vector<std::string> names;
  for (const auto& [name, builder] : Families()) names.push_back(name);
  return names;
}

}  // namespace dslaunch::runtime
