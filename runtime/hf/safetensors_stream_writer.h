// Writes one safetensors file front to back through the file-system seam:
// the header for every tensor first, then each tensor's bytes in the same
// order, converted to the dtype the header names. Only the tensor being
// appended is ever held, so a model is written one tensor at a time.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/fs/file_system.h"
#include "runtime/hf/safetensors_header.h"

namespace dslaunch::runtime {

class SafetensorsStreamWriter {
 public:
  // Creates `path` and writes the header of `entries` (name, dtype, shape;
  // the offsets are computed).
  static absl::StatusOr<std::unique_ptr<SafetensorsStreamWriter>> Create(
      FileSystem& fs, const std::string& path, std::vector<SafetensorsEntryInfo> entries,
      const std::map<std::string, std::string>& metadata);

  // The next entry's values: any floating dtype and device, the entry's
  // shape; converted to the entry's dtype.
  absl::Status Append(const torch::Tensor& values);
  // Every entry appended: fsyncs and closes.
  absl::Status Finish();

  const std::string& path() const { return file_->path(); }

 private:
  SafetensorsStreamWriter(std::unique_ptr<WritableFile> file, std::vector<SafetensorsEntryInfo> entries)
      : file_(std::move(file)), entries_(std::move(entries)) {}

  std::unique_ptr<WritableFile> file_;
  std::vector<SafetensorsEntryInfo> entries_;
  size_t next_ = 0;
};

}  // namespace dslaunch::runtime
