// A Hugging Face model folder, read: `config.json`, and the weights as one
// `model.safetensors` or as shards listed by `model.safetensors.index.json`
// ({"metadata": {"total_size": BYTES}, "weight_map": {tensor: file}}).
//
// Opening checks the folder's own consistency before anything reads a
// value: every shard's header (safetensors_header.h), every tensor the
// index names is in the file it names, no shard holds a tensor the index
// does not list or that another shard also holds. The tensors themselves are
// views of memory-mapped files (safetensors_reader.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/fs/file_system.h"
#include "runtime/hf/safetensors_reader.h"

namespace dslaunch::runtime {

inline constexpr char kHfConfigFile[] = "config.json";
inline constexpr char kHfSingleWeightsFile[] = "model.safetensors";
inline constexpr char kHfWeightsIndexFile[] = "model.safetensors.index.json";
// Files a model folder's tokenizer comes in: copied along on export.
inline constexpr const char* kHfTokenizerFiles[] = {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                                                    "special_tokens_map.json", "generation_config.json"};

class HfModelFolder {
 public:
  // NotFound naming the folder when it has no config.json or no weights
  // (a pytorch_model.bin folder is named as such: convert it first).
  static absl::StatusOr<std::unique_ptr<HfModelFolder>> Open(FileSystem& fs, const std::string& folder);

  const std::string& folder() const { return folder_; }
  const std::string& config_text() const { return config_text_; }
  std::string config_path() const { return folder_ + "/" + kHfConfigFile; }
  // config.json's torch_dtype (or dtype): "float32", "float16", "bfloat16";
  // empty when it has none.
  const std::string& torch_dtype() const { return torch_dtype_; }

  // Every tensor of the model, sorted by name.
  std::vector<std::string> TensorNames() const;
  // nullptr when the model has no such tensor.
  const SafetensorsEntryInfo* Find(const std::string& name) const;
  // The file holding `name` (for messages).
  std::string FileOf(const std::string& name) const;
  // A read-only view into the mapped file (SafetensorsReader::View).
  absl::StatusOr<torch::Tensor> View(const std::string& name) const;

 private:
  HfModelFolder() = default;

  std::string folder_;
  std::string config_text_;
  std::string torch_dtype_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, const SafetensorsReader*> where_;  // tensor -> its file
};

}  // namespace dslaunch::runtime
