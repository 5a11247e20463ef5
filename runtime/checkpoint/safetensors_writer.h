// Writing the safetensors format (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length, a JSON header mapping each tensor's
// name to {dtype, shape, data_offsets}, then the raw little-endian data. The
// writer takes the layout first and the bytes as a stream (or at offsets), so a consolidated
// model never has to sit in memory whole. It writes through the FileSystem
// seam into `<path>.tmp` and renames it into place only when every value is
// there and durable, so a failed or abandoned write leaves no file behind.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

struct SafetensorsEntry {
  std::string name;
  std::vector<int64_t> shape;  // F32 elements
};

class SafetensorsWriter {
 public:
  // Writes the header for `entries` (stored back to back in this order, F32)
  // to a temporary file next to `path`. `fs` must outlive the writer.
  static absl::StatusOr<std::unique_ptr<SafetensorsWriter>> Create(
      FileSystem& fs, const std::string& path, const std::vector<SafetensorsEntry>& entries);
  // Unless Finish() succeeded, removes the temporary file.
  ~SafetensorsWriter();

  // Appends data; the total must equal the sum of the entries' sizes.
  absl::Status Append(const float* data, int64_t count);
  // Writes `count` values at element `element` of the data section (a ZeRO-3
  // shard holds pieces of many tensors). Mixed with Append only when every
  // value is written exactly once.
  absl::Status WriteAt(int64_t element, const float* data, int64_t count);
  // Checks the value count, fsyncs, renames into place and fsyncs the
  // folder. On failure the temporary file is gone and `path` untouched.
  absl::Status Finish();

 private:
  SafetensorsWriter(FileSystem& fs, std::string path, std::unique_ptr<WritableFile> file, int64_t expected);
  std::string TemporaryPath() const { return path_ + ".tmp"; }
  FileSystem& fs_;
  const std::string path_;
  std::unique_ptr<WritableFile> file_;  // null once finished
  const int64_t expected_;
  int64_t written_ = 0;
  int64_t data_start_ = 0;  // bytes before the first value
};

}  // namespace dslaunch::runtime
