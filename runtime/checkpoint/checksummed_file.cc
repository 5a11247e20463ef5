#include "runtime/checkpoint/checksummed_file.h"

#include <utility>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {

struct ChecksummedFileWriter::HashState {
  XXH3_state_t state;
};

std::string FileDigest::HashHex() const { return absl::StrFormat("%016x", xxh3); }

ChecksummedFileWriter::ChecksummedFileWriter(std::unique_ptr<WritableFile> file)
    : path_(file->path()), file_(std::move(file)), hash_(std::make_unique<HashState>()) {
  XXH3_64bits_reset(&hash_->state);
}

ChecksummedFileWriter::~ChecksummedFileWriter() = default;

absl::StatusOr<std::unique_ptr<ChecksummedFileWriter>> ChecksummedFileWriter::Create(FileSystem& fs,
                                                                                     const std::string& path) {
  DS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, fs.NewWritableFile(path));
  return std::unique_ptr<ChecksummedFileWriter>(new ChecksummedFileWriter(std::move(file)));
}

absl::Status ChecksummedFileWriter::Write(const void* data, size_t size) {
  if (!status_.ok()) return status_;
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat("write ", path_, ": already finished"));
  status_ = file_->Append(absl::string_view(static_cast<const char*>(data), size));
  if (!status_.ok()) return status_;
  XXH3_64bits_update(&hash_->state, data, size);
  written_ += static_cast<int64_t>(size);
  return absl::OkStatus();
}

absl::StatusOr<FileDigest> ChecksummedFileWriter::Finish() {
  if (!status_.ok()) return status_;
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat("finish ", path_, ": already finished"));
  status_ = file_->Sync();
  // Close reports errors of delayed writes (NFS, some FUSE file systems).
  absl::Status closed = file_->Close();
  if (status_.ok()) status_ = closed;
  file_.reset();
  if (!status_.ok()) return status_;
  return FileDigest{written_, XXH3_64bits_digest(&hash_->state)};
}

absl::StatusOr<FileDigest> DigestFile(FileSystem& fs, const std::string& path) {
  DS_ASSIGN_OR_RETURN(std::unique_ptr<SequentialFile> file, fs.NewSequentialFile(path));
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  std::vector<char> buffer(1 << 20);
  int64_t size = 0;
  while (true) {
    DS_ASSIGN_OR_RETURN(size_t n, file->Read(buffer.data(), buffer.size()));
    if (n == 0) break;
    XXH3_64bits_update(&state, buffer.data(), n);
    size += static_cast<int64_t>(n);
  }
  return FileDigest{size, XXH3_64bits_digest(&state)};
}

}  // namespace dslaunch::runtime
