// A Hugging Face model folder, written: config.json, the weights in the
// dtype asked for as one model.safetensors or as shards
// model-0000K-of-0000N.safetensors with model.safetensors.index.json (cut at
// max_shard_size the way save_pretrained cuts: a tensor goes to the next
// shard when it would push the current one past the limit), and the
// tokenizer files of the folder the model came from.
//
// Streamed: the tensors are asked for one at a time, in order, from a
// TensorSource (a gathered engine, a consolidated checkpoint), and written
// as they come; nothing holds more than one tensor. The folder appears whole
// or not at all: it is written beside it as .NAME.export-partial and renamed
// into place (an existing FOLDER is moved to .NAME.export-old first, put back
// if the rename fails, and removed only once the new one is in place).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

struct HfTensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// The values of `name` (any floating dtype, any device; the spec's shape).
using HfTensorSource = std::function<absl::StatusOr<torch::Tensor>(const std::string& name)>;

struct HfExportOptions {
  std::string folder;
  torch::ScalarType dtype = torch::kBFloat16;  // F32, F16 or BF16
  int64_t max_shard_bytes = 5'000'000'000;     // save_pretrained's "5GB"
  std::string config_json;                     // written as config.json
  std::string tokenizer_from;                  // a folder whose tokenizer files are copied; empty: none
  // A model folder's names; a PEFT adapter folder is "adapter_model" and
  // "adapter_config.json" (runtime/model/lora.h).
  std::string weights_stem = "model";          // model.safetensors, model-00001-of-00002.safetensors
  std::string config_file = "config.json";
};

// "5GB", "500MB", "2GiB", "1000" (bytes) → bytes (GB = 10^9, GiB = 2^30, as
// Hugging Face reads max_shard_size). InvalidArgument naming `flag` otherwise.
absl::StatusOr<int64_t> ParseShardSize(const std::string& text, const std::string& flag);

// "float32", "float16", "bfloat16" (also "fp32", "fp16", "bf16").
absl::StatusOr<torch::ScalarType> ParseExportDtype(const std::string& text, const std::string& flag);
// "float32", "float16", "bfloat16".
std::string TorchDtypeName(torch::ScalarType dtype);

absl::Status ExportHfFolder(FileSystem& fs, const HfExportOptions& options, const std::vector<HfTensorSpec>& tensors,
                            const HfTensorSource& source);

}  // namespace dslaunch::runtime
