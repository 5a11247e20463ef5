#include "runtime/model/model_registry.h"

#include <algorithm>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/model/gpt.h"

namespace dslaunch::runtime {
namespace {

using Builder = std::function<BuiltModel(const ModelSpec&, uint64_t seed)>;

BuiltModel BuildGpt(const ModelSpec& spec, uint64_t seed) {
  GptOptions options;
  options.layers = spec.layers;
  options.heads = spec.heads;
  options.width = spec.width;
  options.sequence_length = spec.sequence_length;
  options.vocab_size = spec.vocab_size;
  options.dropout = spec.dropout;
  options.checkpointed_blocks = spec.checkpointed_blocks;
  options.checkpoint_to_cpu = spec.checkpoint_to_cpu;
  options.fused_kernels = spec.fused_kernels;
  auto gpt = std::make_shared<GptImpl>(options, seed);
  return BuiltModel{gpt, gpt.get()};
}

// One line per family.
const std::map<std::string, Builder>& Families() {
  static const auto* const families = new std::map<std::string, Builder>{
      {"gpt", BuildGpt},
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
