// A LoRA fine-tune's checkpoint as a whole Hugging Face model (dsconsolidate
// --format hf --lora_alpha): Note [LoRA checkpoints to Hugging Face].
//
// Note [LoRA checkpoints to Hugging Face]
// A LoRA job trains, and so checkpoints, only its adapters: lora_A [r, in]
// and lora_B [out, r] of each adapted projection. Its base weights stay in
// the folder it started from. A Hugging Face folder is therefore the base
// folder's tensors with each adapted projection's weight merged,
// W + scale·B·A (in fp32, then W's dtype: what the job's own export.hf_dir
// computes), scale = lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA.
// lora_alpha is not in the checkpoint, so it is asked for; without it the
// export is refused, not written as a folder of adapters under a model's
// config.json (what dsconsolidate wrote before: no loader can use it).
#pragma once

#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

struct LoraMergeSettings {
  double alpha = 0;  // the job's lora.lora_alpha (> 0)
  bool use_rslora = false;
};

// The adapted projections among a checkpoint's tensor names: the PREFIX of
// each "PREFIX.lora_A.weight" / "PREFIX.lora_B.weight" pair. An adapter
// without its pair is an error naming it. Empty: not a LoRA checkpoint.
absl::StatusOr<std::set<std::string>> LoraAdaptedProjections(const std::vector<std::string>& names);

// PREFIX.weight (`weight`) merged with its adapter; an error naming the
// projection when the shapes do not fit together.
absl::StatusOr<torch::Tensor> MergeLoraWeight(const std::string& prefix, const torch::Tensor& weight,
                                              const torch::Tensor& lora_a, const torch::Tensor& lora_b,
                                              const LoraMergeSettings& settings);

}  // namespace dslaunch::runtime
