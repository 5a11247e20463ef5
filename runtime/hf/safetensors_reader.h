// One safetensors file, memory-mapped through the file-system seam: tensors
// are views of the mapping, so reading a tensor touches only its pages (a
// rank that keeps a slice reads only the slice).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/fs/file_system.h"
#include "runtime/hf/safetensors_header.h"

namespace dslaunch::runtime {

// The LibTorch dtype of a safetensors dtype; nullopt for those LibTorch (or
// this runtime) has no type for.
std::optional<torch::ScalarType> TorchDtypeOf(SafetensorsDtype dtype);
// The safetensors dtype of F32, F16 or BF16; InvalidArgument for others.
absl::StatusOr<SafetensorsDtype> SafetensorsDtypeOf(torch::ScalarType dtype);

class SafetensorsReader {
 public:
  // Maps `path` and checks its header (ParseSafetensorsHeader).
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> Open(FileSystem& fs, const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntryInfo>& entries() const { return header_.entries; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // nullptr when the file has no such tensor.
  const SafetensorsEntryInfo* Find(const std::string& name) const;

  // A read-only view of the tensor's bytes in the mapping (valid while this
  // reader lives; copy or convert before keeping it). NotFound / an error
  // for dtypes LibTorch cannot view, naming the file and tensor.
  absl::StatusOr<torch::Tensor> View(const std::string& name) const;

 private:
  SafetensorsReader(std::string path, std::unique_ptr<ReadOnlyMemoryRegion> region, SafetensorsHeader header);

  std::string path_;
  std::unique_ptr<ReadOnlyMemoryRegion> region_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;  // name -> entries()
};

}  // namespace dslaunch::runtime
