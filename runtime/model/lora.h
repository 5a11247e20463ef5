// LoRA on a model (Note [LoRA] in lora_linear.h): adapters on the named
// projections, everything else frozen, and what an export needs.
//
// Note [LoRA under tensor parallelism]
// An adapter is split with its projection, the way the merged weight
// W + s·B·A would be, so each rank's factors are its slice of the unsplit
// model's and every rank's forward adds exactly its slice of the unsplit
// adapter's output:
// - column-parallel (output rows split): B's rows are split like W's; A is
//   whole on every rank. The input is whole, so A·x is the same everywhere,
//   but each rank's backward reaches A through its own rows of B only: A's
//   gradient is all-reduced across the group (ReplicatedWithPartialGradient).
//   The input's gradient needs nothing more: the column-parallel region's
//   backward already sums it.
// - row-parallel (input columns split): A's columns are split like W's; B
//   is whole. Each rank adds s·(x_part·A_partᵀ)·Bᵀ to its partial product
//   before the reduction, so the sum across the group is the unsplit
//   adapter's output; B's gradient is each rank's part and is all-reduced.
// - a replicated key/value projection (fewer key/value heads than ranks) is
//   whole on every rank, and so are its factors; each rank computes the rows
//   of its head, so both gradients are all-reduced.
// Dropout draws the unsplit input's mask on every rank (Note [Dropout
// streams]) and a row-parallel rank keeps its columns of it. The
// initialisation draws each A whole and keeps the rank's columns, so a split
// model starts from the unsplit model's adapters. Checkpoints carry the
// split factors' forms (LoraAdapterForms), so they reshard and export like
// the base weights. An adapter on a vocabulary-split output head is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/model/lora_linear.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"

namespace dslaunch::runtime {

// PEFT's LoraConfig, the keys that shape the math.
struct LoraSettings {
  LoraAdapterOptions adapter;
  // Module names as PEFT matches them: a projection whose name is one of
  // these or ends with "." + one of these ("q_proj", "self_attn.q_proj");
  // "all-linear": every projection but the output head.
  std::vector<std::string> target_modules;
  // PEFT's other form of target_modules, a string: a regular expression the
  // whole module name must match (Python's re.fullmatch; read here as
  // ECMAScript, which agrees with Python on the patterns adapters use:
  // alternation, classes, groups, repeats, anchors). Set instead of
  // target_modules, never with it.
  std::string target_pattern;
};

// PEFT's shorthand for every projection but the output head.
inline constexpr char kLoraAllLinear[] = "all-linear";
// Whether `target_modules` is the shorthand alone.
inline bool TargetsAllLinear(const std::vector<std::string>& target_modules) {
  return target_modules.size() == 1 && target_modules[0] == kLoraAllLinear;
}

struct LoraSummary {
  int64_t adapted_projections = 0;
  // The adapted projections' last name components, in module order, each
  // once ("q_proj", ..., "w1"): what PEFT's target_modules names.
  std::vector<std::string> adapted_kinds;
  int64_t trainable_parameters = 0;  // elements of lora_A and lora_B
  int64_t frozen_parameters = 0;     // elements of everything else
};

// Puts an adapter on every targeted projection of `model` (initialised from
// `seed`, the same on every rank) and freezes every other parameter. Fails,
// naming the entry, when a target matches no projection, and when the model
// has no projection that can carry one.
absl::StatusOr<LoraSummary> ApplyLora(torch::nn::Module& model, const LoraSettings& settings, uint64_t seed);

// ".lora_A." or ".lora_B." is in the name.
bool IsLoraParameterName(const std::string& name);

// The form of adapter factor `factor` ("<projection>.lora_A.weight" or
// "<projection>.lora_B.weight") on a projection split as `projection_form`
// (Note [LoRA under tensor parallelism]): a column-parallel projection's B
// is split by rows (in as many fused parts as the weight), a row-parallel
// projection's A by columns; nullopt for the factor that stays whole.
// Unimplemented for a vocabulary-split projection.
absl::StatusOr<std::optional<TensorParallelForm>> LoraFactorForm(const TensorParallelForm& projection_form,
                                                                  const std::string& factor);
// The forms of the split factors of every adapter on `model`, given the
// forms of the model's split parameters.
absl::StatusOr<std::vector<TensorParallelForm>> LoraAdapterForms(const torch::nn::Module& model,
                                                                 const std::vector<TensorParallelForm>& forms);

// The model's parameters as a full (merged) checkpoint: every parameter that
// is not an adapter's, with each adapted projection's weight merged
// (W + scale·B·A). Names in parameters() order.
std::vector<std::string> MergedParameterNames(const torch::nn::Module& model);
// `name` is one of MergedParameterNames; the merged value for a weight that
// carries an adapter, the parameter itself otherwise.
torch::Tensor MergedParameter(const torch::nn::Module& model, const std::string& name);

// PEFT's adapter folder: adapter_model.safetensors names each adapter tensor
// "base_model.model." + our name; adapter_config.json as PEFT writes it.
inline constexpr char kPeftKeyPrefix[] = "base_model.model.";
inline constexpr char kPeftConfigFile[] = "adapter_config.json";
inline constexpr char kPeftWeightsFile[] = "adapter_model.safetensors";
std::string PeftAdapterConfigJson(const LoraSettings& settings, const std::string& base_model_name_or_path);

}  // namespace dslaunch::runtime
