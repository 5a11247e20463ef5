#include "runtime/checkpoint/safetensors_writer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_quote.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

namespace {

absl::string_view Bytes(const float* data, int64_t count) {
  return absl::string_view(reinterpret_cast<const char*>(data), static_cast<size_t>(count) * sizeof(float));
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(FileSystem& fs, std::string path, std::unique_ptr<WritableFile> file,
                                     int64_t expected)
    : fs_(fs), path_(std::move(path)), file_(std::move(file)), expected_(expected) {}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_ != nullptr) {
    file_.reset();
    (void)fs_.RemoveFile(TemporaryPath());
  }
}

absl::StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    FileSystem& fs, const std::string& path, const std::vector<SafetensorsEntry>& entries) {
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
  DS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, fs.NewWritableFile(path + ".tmp"));
  auto writer = std::unique_ptr<SafetensorsWriter>(new SafetensorsWriter(fs, path, std::move(file), offset / 4));
  const uint64_t length = header.size();
  char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>(length >> (8 * i));
  DS_RETURN_IF_ERROR(writer->file_->Append(absl::string_view(prefix, 8)));
  DS_RETURN_IF_ERROR(writer->file_->Append(header));
  writer->data_start_ = 8 + static_cast<int64_t>(header.size());
  return writer;
}

absl::Status SafetensorsWriter::WriteAt(int64_t element, const float* data, int64_t count) {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat("safetensors ", path_, ": finished"));
  if (element < 0 || element + count > expected_) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: values [", element, ", ", element + count,
                                                   ") outside a layout of ", expected_));
  }
  DS_RETURN_IF_ERROR(file_->WriteAt(static_cast<uint64_t>(data_start_ + element * 4), Bytes(data, count)));
  written_ += count;
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Append(const float* data, int64_t count) {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat("safetensors ", path_, ": finished"));
  if (written_ + count > expected_) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: ", written_ + count,
                                                   " values for a layout of ", expected_));
  }
  DS_RETURN_IF_ERROR(file_->Append(Bytes(data, count)));
  written_ += count;
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Finish() {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat("safetensors ", path_, ": finished"));
  if (written_ != expected_) {
    return absl::DataLossError(absl::StrCat("safetensors: wrote ", written_, " of ", expected_, " values"));
  }
  absl::Status done = file_->Sync();
  // Close reports what a delayed write-back found; the descriptor goes either way.
  if (absl::Status closed = file_->Close(); done.ok()) done = closed;
  file_.reset();
  if (done.ok()) done = fs_.Rename(TemporaryPath(), path_);
  if (!done.ok()) {
    (void)fs_.RemoveFile(TemporaryPath());
    return done;
  }
  return fs_.SyncDirectory(ParentDirectory(path_));
}

}  // namespace dslaunch::runtime
