// The safetensors header (https://github.com/huggingface/safetensors): an
// 8-byte little-endian length N, then N bytes of JSON
//   {"NAME": {"dtype": "BF16", "shape": [4096, 4096], "data_offsets": [BEGIN, END]}, ...,
//    "__metadata__": {"format": "pt"}}
// with offsets relative to the first byte after the header. Plain C++.
//
// Parsing trusts nothing: the length must fit the file, the JSON must parse,
// every tensor's byte range must lie inside the data, match its shape and
// dtype, and overlap no other. A header that lies is an error naming the
// file and the tensor, found before a single value is read.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

// The dtypes a model's weights come in. Others (I8, F8_E4M3, ...) parse
// with their size when known, so the error can say which tensor has which.
enum class SafetensorsDtype { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool, kUnknown };

// "F32", "BF16", ...
const char* SafetensorsDtypeName(SafetensorsDtype dtype);
SafetensorsDtype SafetensorsDtypeFromName(const std::string& name);
// Bytes per element; 0 for kUnknown.
int64_t SafetensorsDtypeSize(SafetensorsDtype dtype);

struct SafetensorsEntryInfo {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::string dtype_name;        // as written
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;    // bytes, relative to the data section

  int64_t elements() const;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntryInfo> entries;  // in data order
  std::map<std::string, std::string> metadata;
  int64_t data_start = 0;                    // 8 + N: where the data section begins in the file
};

// The header is 100 MB at most, as the reference implementation allows.
inline constexpr int64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// `file` is at least the first min(file_size, 8 + N) bytes of the file;
// `file_size` its full size. `path` names it in errors.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* file, int64_t available,
                                                         int64_t file_size, const std::string& path);

// The 8-byte length and the JSON for `entries` stored back to back in their
// order (begin/end are computed and written into `entries`), padded with
// spaces so the data starts 8-byte aligned.
std::string BuildSafetensorsHeader(std::vector<SafetensorsEntryInfo>& entries,
                                   const std::map<std::string, std::string>& metadata);


}  // namespace dslaunch::runtime
