// A Hugging Face folder's weights into a module whose parameter names are
// Hugging Face's (runtime/model/llama.h), checked whole before any value is
// copied: every parameter has a tensor of its shape, no tensor is left over,
// every tensor is F32, F16 or BF16 and (when config.json says torch_dtype)
// of that dtype. Every problem is reported at once, naming the file and the
// tensor.
//
// Two kinds of extra tensor are known and skipped: the rotary tables
// (`*.rotary_emb.inv_freq`) older conversions saved, which the model computes
// from config.json; and `lm_head.weight` in a tied model, accepted only when
// it equals the embedding.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/hf/hf_model_folder.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"

namespace dslaunch::runtime {

// Values are converted to each parameter's dtype. Without a torch_dtype in
// config.json any of F32/F16/BF16 is accepted. A module split over a
// tensor-parallel group (Note [Tensor parallelism]) gives its `forms` and
// this rank's place in the group: each parameter with a form receives its
// slice (SliceForRank) of the folder's tensor, read through the file's
// mapping, and shapes are checked against the slice. A folder tensor the
// module lacks is an error unless `held_elsewhere` says another rank holds
// it (an expert of another expert-parallel rank).
// A parameter the module holds deferred (Note [Shard-only loading]) is
// refused: those are read by an HfParameterSource instead.
absl::Status LoadHfWeights(const HfModelFolder& folder, torch::nn::Module& module,
                           const std::vector<TensorParallelForm>& forms = {}, int tp_rank = 0, int tp_size = 1,
                           const std::function<bool(const std::string&)>& held_elsewhere = {});

// LoadHfWeights' checks alone, every one, copying nothing: for a module
// whose parameters are deferred (Note [Shard-only loading]) and filled later
// by an HfParameterSource over the same folder.
absl::Status CheckHfWeights(const HfModelFolder& folder, const torch::nn::Module& module,
                            const std::vector<TensorParallelForm>& forms = {}, int tp_rank = 0, int tp_size = 1,
                            const std::function<bool(const std::string&)>& held_elsewhere = {});

}  // namespace dslaunch::runtime
