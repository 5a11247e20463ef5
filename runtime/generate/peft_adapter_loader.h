// Note [PEFT adapter folders in]: a LoRA adapter folder as PEFT writes it
// (adapter_config.json + adapter_model.safetensors, what `export.adapter_dir`
// writes too) put on a loaded base model for generation, unmerged: each
// targeted projection computes W·x + scale·B·(A·x).
//
// adapter_config.json is read for what shapes the math: r, lora_alpha,
// use_rslora and target_modules (a list, or "all-linear"). Settings this
// runtime does not compute are refused by name when set: use_dora, a bias
// other than "none", fan_in_fan_out, modules_to_save, layers_to_transform,
// rank_pattern and alpha_pattern, a peft_type other than LORA. Every adapter
// tensor the settings put on the model must be in the file with its shape,
// and every tensor of the file must be one of them.
#pragma once

#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/fs/file_system.h"
#include "runtime/model/lora.h"

namespace dslaunch::runtime {

// The folder's adapter_config.json, checked as above.
absl::StatusOr<LoraSettings> ReadPeftAdapterConfig(FileSystem& fs, const std::string& folder);

// Puts the folder's adapters on `model` (in the dtype and on the device of
// the model's parameters). Returns how many projections it adapted.
absl::StatusOr<LoraSummary> LoadPeftAdapter(FileSystem& fs, const std::string& folder, torch::nn::Module& model);

}  // namespace dslaunch::runtime
