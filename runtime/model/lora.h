// LoRA on a model (Note [LoRA] in lora_linear.h): adapters on the named
// projections, everything else frozen, and what an export needs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/model/lora_linear.h"

namespace dslaunch::runtime {

// PEFT's LoraConfig, the keys that shape the math.
struct LoraSettings {
  LoraAdapterOptions adapter;
  // Module names as PEFT matches them: a projection whose name is one of
  // these or ends with "." + one of these ("q_proj", "self_attn.q_proj");
  // "all-linear": every projection but the output head.
  std::vector<std::string> target_modules;
};

struct LoraSummary {
  int64_t adapted_projections = 0;
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
