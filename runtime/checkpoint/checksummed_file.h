// Files that know what they hold: written with every system call checked and
// an xxHash (XXH3, 64 bits) of the bytes computed as they go, or hashed when
// read back. A checkpoint's commit record (checkpoint_manifest.h) lists each
// file's size and hash, so a flipped byte, a truncated file or a deleted one
// is found before any of it is used.
//
// Every error names the system call, the path and the errno
// ("write /ck/.global_step20.partial/rank_0.pt: No space left on device (ENOSPC)").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

struct FileDigest {
  int64_t size = 0;
  uint64_t xxh3 = 0;

  std::string HashHex() const;  // 16 lower-case hex digits
  bool operator==(const FileDigest& other) const { return size == other.size && xxh3 == other.xxh3; }
};

// Writes one file from the start. Not thread-safe.
class ChecksummedFileWriter {
 public:
  // Creates (or truncates) `path` in `fs`.
  static absl::StatusOr<std::unique_ptr<ChecksummedFileWriter>> Create(FileSystem& fs, const std::string& path);
  // Closes the file if Finish was not called (it stays, unsynced).
  ~ChecksummedFileWriter();

  // Writes all `size` bytes or fails; after a failure every call fails with
  // the first error.
  absl::Status Write(const void* data, size_t size);
  // fsync and close, each checked; the digest of everything written.
  absl::StatusOr<FileDigest> Finish();

  const absl::Status& status() const { return status_; }
  const std::string& path() const { return path_; }

 private:
  explicit ChecksummedFileWriter(std::unique_ptr<WritableFile> file);
  struct HashState;
  const std::string path_;
  std::unique_ptr<WritableFile> file_;  // null once finished
  std::unique_ptr<HashState> hash_;
  int64_t written_ = 0;
  absl::Status status_;
};

// The digest of a file as it is on disk now (read in 1 MiB pieces).
absl::StatusOr<FileDigest> DigestFile(FileSystem& fs, const std::string& path);

}  // namespace dslaunch::runtime
