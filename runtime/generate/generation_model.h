// The model dsgen and dsserve generate with: a Hugging Face folder's Llama
// weights, a PEFT adapter put on them unmerged (Note [PEFT adapter folders
// in]) when given, in the compute dtype on the device, in eval mode.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "runtime/model/llama.h"

namespace dslaunch::runtime {

struct GenerationModelOptions {
  std::string model;    // folder
  std::string adapter;  // folder, or empty
  std::string dtype = "float32";  // float32 | bfloat16 | float16 (named --dtype in errors)
  std::string device = "cpu";     // cpu | cuda | cuda:N (named --device in errors)
  int64_t checkpointed_layers = 0;
};

absl::StatusOr<Llama> LoadGenerationModel(const GenerationModelOptions& options);

// Parses --device; InvalidArgument naming the flag.
absl::StatusOr<torch::Device> ParseGenerationDevice(const std::string& text);

}  // namespace dslaunch::runtime
