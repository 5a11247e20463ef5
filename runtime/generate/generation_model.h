// The model dsgen and dsserve generate with: a Hugging Face folder's Llama
// weights, a PEFT adapter put on them unmerged (Note [PEFT adapter folders
// in]) when given, in the compute dtype on the device, in eval mode.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/flag_table.h"
#include "runtime/model/llama.h"

namespace dslaunch::runtime {

struct GenerationModelOptions {
  std::string model;    // folder (config.json; its weights unless `checkpoint`)
  std::string adapter;  // folder, or empty
  // A training checkpoint folder (checkpoint.dir of a job that started from
  // `model`), any ZeRO stage or data-parallel size, pipeline stages too:
  // its fp32 masters are consolidated in memory and are the weights (no
  // conversion step). `checkpoint_tag` empty: the one `latest` names.
  std::string checkpoint;
  std::string checkpoint_tag;
  std::string dtype = "float32";  // float32 | bfloat16 | float16 (named --dtype in errors)
  std::string device = "cpu";     // cpu | cuda | cuda:N (named --device in errors)
  int64_t checkpointed_layers = 0;
  // Split over this tensor group (Note [Tensor-parallel generation]): each
  // rank reads its slices of the folder's tensors.
  TensorParallelGroup tensor_parallel;
  // Weight-only int8 projections (Note [Int8 weights]), after the move to
  // the device and dtype.
  bool int8 = false;
  // The CUDA kernels for RMSNorm, RoPE, SwiGLU and paged decode attention
  // (model.fused_kernels of a job file); a CUDA device only.
  bool fused_kernels = false;
  // ZeRO-Inference (Note [Streamed layer weights]): "cpu" keeps the decoder
  // layers' weights in host memory and streams them to the device layer by
  // layer; "nvme" keeps them in files under nvme_path (Note [Layer weights
  // on NVMe]); "none" puts the whole model on the device.
  std::string offload_params = "none";
  std::string nvme_path;
};

// Errors name the file, tensor or flag. A checkpoint of LoRA adapters only
// is refused (its base is the folder; its adapters go out as a PEFT folder
// with export.adapter_dir, for --adapter).
absl::StatusOr<Llama> LoadGenerationModel(const GenerationModelOptions& options);

// The flags of dsgen and dsserve that name the model, into `options`
// (--device's text into options->device, which the tool then replaces by
// its rank's device) and `local_rank` (what dslaunch passes):
// --model, --adapter, --checkpoint, --checkpoint_tag, --dtype, --int8,
// --fused_kernels, --offload_params, --nvme_path, --device, --local_rank.
void AddGenerationModelFlags(FlagTable& flags, GenerationModelOptions* options, int64_t* local_rank);
// What the flags cannot say alone: --model given, --checkpoint_tag only
// with --checkpoint, --checkpoint or --adapter but not both,
// --fused_kernels only on a CUDA --device, --nvme_path exactly with
// --offload_params nvme. Empty: fine.
std::string GenerationModelFlagsProblem(const GenerationModelOptions& options);

// Parses --device; InvalidArgument naming the flag.
absl::StatusOr<torch::Device> ParseGenerationDevice(const std::string& text);

}  // namespace dslaunch::runtime
