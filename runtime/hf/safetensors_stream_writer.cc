#include "runtime/hf/safetensors_stream_writer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/hf/safetensors_reader.h"

namespace dslaunch::runtime {

absl::StatusOr<std::unique_ptr<SafetensorsStreamWriter>> SafetensorsStreamWriter::Create(
    FileSystem& fs, const std::string& path, std::vector<SafetensorsEntryInfo> entries,
    const std::map<std::string, std::string>& metadata) {
  for (const SafetensorsEntryInfo& entry : entries) {
    if (SafetensorsDtypeSize(entry.dtype) == 0 || !TorchDtypeOf(entry.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", entry.name, "' has no writable dtype"));
    }
  }
  const std::string header = BuildSafetensorsHeader(entries, metadata);
  auto file = fs.NewWritableFile(path);
  if (!file.ok()) return file.status();
  if (absl::Status s = (*file)->Append(header); !s.ok()) return s;
  return std::unique_ptr<SafetensorsStreamWriter>(new SafetensorsStreamWriter(std::move(*file), std::move(entries)));
}

absl::Status SafetensorsStreamWriter::Append(const torch::Tensor& values) {
  if (next_ >= entries_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(path(), ": more tensors appended than the header lists"));
  }
  const SafetensorsEntryInfo& entry = entries_[next_];
  if (values.sizes().vec() != entry.shape) {
    return absl::InvalidArgumentError(absl::StrCat(path(), ": tensor '", entry.name, "' has shape [",
                                                   absl::StrJoin(values.sizes().vec(), ", "), "], the header says [",
                                                   absl::StrJoin(entry.shape, ", "), "]"));
  }
  torch::Tensor bytes;
  try {
    bytes = values.detach().to(torch::kCPU, *TorchDtypeOf(entry.dtype)).contiguous();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(path(), ": tensor '", entry.name, "': ", e.what_without_backtrace()));
  }
  const size_t size = static_cast<size_t>(entry.end - entry.begin);
  if (size > 0) {
    if (absl::Status s = file_->Append(absl::string_view(static_cast<const char*>(bytes.data_ptr()), size)); !s.ok()) {
      return s;
    }
  }
  ++next_;
  return absl::OkStatus();
}

absl::Status SafetensorsStreamWriter::Finish() {
  if (next_ != entries_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(path(), ": ", next_, " of ", entries_.size(),
                                                      " tensors appended before Finish"));
  }
  if (absl::Status s = file_->Sync(); !s.ok()) return s;
  return file_->Close();
}

}  // namespace dslaunch::runtime
