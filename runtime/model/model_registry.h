// Model families by name (`model.type` in train.cfg): Note [Model interface].
// A new family adds its file to runtime/model/ and one entry to the table in
// model_registry.cc.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/model/model_interface.h"
#include "runtime/moe/moe_options.h"

namespace dslaunch::runtime {

// What a family is built from: the job's model section, resolved (the
// vocabulary from the dataset when the file leaves it 0).
struct ModelSpec {
  std::string type = "gpt";
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t width = 0;
  int64_t sequence_length = 0;
  int64_t vocab_size = 0;
  double dropout = 0;
  int64_t checkpointed_blocks = 0;
  bool checkpoint_to_cpu = false;
  bool partition_checkpoints = false;  // partition_activations (Note [Partitioned activations])
  bool fused_kernels = false;
  // Note [Tensor parallelism]: this rank's tensor-parallel group (the model
  // holds its slices), the vocabulary divisor and the loss's label smoothing.
  TensorParallelGroup tensor_parallel;
  int vocab_divisor = 1;
  double label_smoothing = 0;
  // Note [Mixture of experts]: the experts (gating.num_experts 0: none) and
  // this rank's expert-parallel group. GPT: GELU experts in every moe.every-
  // th block; Llama: Mixtral's SwiGLU experts.
  MoeOptions moe;
  // A Hugging Face model folder's config.json, read by the caller (the
  // llama family builds from it; empty: the sizes above, from scratch), and
  // its path for messages.
  std::string hf_config_text;
  std::string hf_config_path;
  // Note [Shard-only loading]: the parameters are built deferred (sizes, no
  // memory), for a ZeRO-3 engine to fill from a ParameterSource (the
  // folder's, or SeededParameterSource for a model from its seed).
  bool deferred_parameters = false;
};

struct BuiltModel {
  std::shared_ptr<torch::nn::Module> module;  // what the engine trains
  ModelInterface* model = nullptr;            // the same object, as a model family
  // Families with a Hugging Face form: the config.json of this model with
  // its weights stored as `torch_dtype` ("bfloat16", ...). Empty otherwise.
  std::function<std::string(const std::string& torch_dtype)> hf_config_json;
};

// The same weights on every rank for the same seed. InvalidArgument naming
// `model.type` and the known families when the type is unknown.
absl::StatusOr<BuiltModel> BuildModel(const ModelSpec& spec, uint64_t seed);

// The known families, sorted.
std::vector<std::string> ModelFamilies();

}  // namespace dslaunch::runtime
