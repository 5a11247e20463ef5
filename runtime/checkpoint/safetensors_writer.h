// Writing the safetensors format (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length, a JSON header mapping each tensor's
// name to {dtype, shape, data_offsets}, then the raw little-endian data. The
// writer takes the layout first and the bytes as a stream (or at offsets), so a consolidated
// model never has to sit in memory whole.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

struct SafetensorsEntry {
  std::string name;
  std::vector<int64_t> shape;  // F32 elements
};

class SafetensorsWriter {
 public:
  // Writes the header for `entries` (stored back to back in this order, F32)
  // to a temporary file next to `path`.
  static absl::StatusOr<std::unique_ptr<SafetensorsWriter>> Create(
      const std::string& path, const std::vector<SafetensorsEntry>& entries);
  ~SafetensorsWriter();

  // Appends data; the total must equal the sum of the entries' sizes.
  absl::Status Append(const float* data, int64_t count);
  // Writes `count` values at element `element` of the data section (a ZeRO-3
  // shard holds pieces of many tensors). Mixed with Append only when every
  // value is written exactly once.
  absl::Status WriteAt(int64_t element, const float* data, int64_t count);
  // Checks the byte count, fsyncs and renames into place.
  absl::Status Finish();

 private:
  SafetensorsWriter(std::string path, std::FILE* file, int64_t expected);
  const std::string path_;
  std::FILE* file_;
  const int64_t expected_;
  int64_t written_ = 0;
  int64_t data_start_ = 0;  // bytes before the first value
};

}  // namespace dslaunch::runtime
