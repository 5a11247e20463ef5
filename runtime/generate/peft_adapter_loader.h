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
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/fs/file_system.h"
#include "runtime/model/lora.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"

namespace dslaunch::runtime {

// The folder's adapter_config.json, checked as above.
absl::StatusOr<LoraSettings> ReadPeftAdapterConfig(FileSystem& fs, const std::string& folder);

// A model split over a tensor group: its projections' forms and this rank.
struct AdapterSlicing {
  std::vector<TensorParallelForm> forms;  // the model's (TensorParallelForms)
  int rank = 0;
  int size = 1;
};

// Puts the folder's adapters on `model` (in the dtype and on the device of
// the model's parameters). Returns how many projections it adapted. With
// `slicing` (a split model), each rank takes its part of the folder's whole
// adapters: a column-parallel projection's lora_B rows (its output rows), a
// row-parallel projection's lora_A columns (its input columns); the other
// factor is whole. An adapter on a vocabulary-split head is refused.
absl::StatusOr<LoraSummary> LoadPeftAdapter(FileSystem& fs, const std::string& folder, torch::nn::Module& model,
                                            const AdapterSlicing& slicing = {});

}  // namespace dslaunch::runtime
