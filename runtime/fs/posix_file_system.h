// FileSystem on plain POSIX calls: every system call checked, EINTR retried,
// errors through ErrnoStatus ("fsync /ck/x: Input/output error (EIO)").
// Stateless, so thread-safe; FileSystem::Default() is one of these.
#pragma once

#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

class PosixFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<ReadOnlyMemoryRegion>> MapReadOnly(const std::string& path) override;
  using FileSystem::ReadFile;  // the one without a limit
  absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes) override;
  absl::StatusOr<FileInfo> Stat(const std::string& path) override;
  absl::Status CreateDirectories(const std::string& path) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status RemoveTree(const std::string& path) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override;
  absl::Status SyncDirectory(const std::string& path) override;
};

}  // namespace dslaunch::runtime
