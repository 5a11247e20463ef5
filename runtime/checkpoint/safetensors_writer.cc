#include "runtime/checkpoint/safetensors_writer.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_quote.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {
namespace {


}  // namespace

SafetensorsWriter::SafetensorsWriter(std::string path, std::FILE* file, int64_t expected)
    : path_(std::move(path)), file_(file), expected_(expected) {}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    ::unlink((path_ + ".tmp").c_str());
  }
}

absl::StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::string& path, const std::vector<SafetensorsEntry>& entries) {
  std::vector<std::string> fields;
  int64_t offset = 0;
  for (const auto& entry : entries) {
    int64_t elements = 1;
    for (int64_t d : entry.shape) elements *= d;
    const int64_t end = offset + elements * 4;
    fields.push_back(absl::StrCat(JsonQuote(entry.name), ":{\"dtype\":\"F32\",\"shape\":[",
                                  absl::StrJoin(entry.shape, ","), "],\"data_offsets\":[", offset,
                                  ",", end, "]}"));
    offset = end;
  }
  std::string header = absl::StrCat("{", absl::StrJoin(fields, ","), "}");
  // The format asks for the data to start 8-byte aligned: pad with spaces.
  while ((header.size() % 8) != 0) header += ' ';
  std::FILE* file = std::fopen((path + ".tmp").c_str(), "wb");
  if (file == nullptr) return ErrnoStatus(absl::StrCat("create ", path, ".tmp"));
  uint64_t length = header.size();
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(length >> (8 * i));
  std::fwrite(prefix, 1, 8, file);
  std::fwrite(header.data(), 1, header.size(), file);
  auto writer = std::unique_ptr<SafetensorsWriter>(new SafetensorsWriter(path, file, offset / 4));
  writer->data_start_ = 8 + static_cast<int64_t>(header.size());
  return writer;
}

absl::Status SafetensorsWriter::WriteAt(int64_t element, const float* data, int64_t count) {
  if (element < 0 || element + count > expected_) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: values [", element, ", ", element + count,
                                                   ") outside a layout of ", expected_));
  }
  if (std::fseek(file_, data_start_ + element * 4, SEEK_SET) != 0) {
    return ErrnoStatus(absl::StrCat("seek ", path_, ".tmp"));
  }
  if (std::fwrite(data, sizeof(float), count, file_) != static_cast<size_t>(count)) {
    return ErrnoStatus(absl::StrCat("write ", path_, ".tmp"));
  }
  written_ += count;
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Append(const float* data, int64_t count) {
  if (written_ + count > expected_) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: ", written_ + count,
                                                   " values for a layout of ", expected_));
  }
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");
  if (std::fwrite(data, sizeof(float), count, file_) != static_cast<size_t>(count)) {
    return ErrnoStatus(absl::StrCat("write ", path_, ".tmp"));
  }
  written_ += count;
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Finish() {
  if (written_ != expected_) {
    return absl::DataLossError(absl::StrCat("safetensors: wrote ", written_, " of ", expected_, " values"));
  }
  if (std::fflush(file_) != 0) return ErrnoStatus("write " + path_ + ".tmp");
  if (::fsync(::fileno(file_)) != 0) return ErrnoStatus("fsync " + path_ + ".tmp");
  // fclose reports what a delayed write-back found; the file is gone either way.
  const int closed = std::fclose(file_);
  file_ = nullptr;
  if (closed != 0) {
    absl::Status failed = ErrnoStatus("close " + path_ + ".tmp");
    ::unlink((path_ + ".tmp").c_str());
    return failed;
  }
  if (std::rename((path_ + ".tmp").c_str(), path_.c_str()) != 0) {
    absl::Status failed = ErrnoStatus("rename " + path_ + ".tmp to " + path_);
    ::unlink((path_ + ".tmp").c_str());
    return failed;
  }
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
