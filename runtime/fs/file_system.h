// The one seam between the runtime and the file system (leveldb's `Env`
// idea): checkpoints, prepared datasets and tokenizer models are written and
// read through a FileSystem, never through open/rename/fsync directly. The
// POSIX implementation (posix_file_system.h) is what runs; tests wrap it in
// FaultInjectingFileSystem (fault_injecting_file_system.h) to fail the Nth
// write, fsync or rename with a chosen errno, or to hold a save at a named
// point until the test releases it.
//
// Every error names the operation, the path and the errno, as the system
// call would ("write /ck/.global_step20.partial/rank_0.pt: No space left on
// device (ENOSPC)"), with the code of common/status_macros.h's ErrnoStatus
// (ENOSPC → ResourceExhausted, ENOENT → NotFound, ...).
//
// Why not std::filesystem: the LibTorch 2.x wheels export some
// std::filesystem symbols of their own; a program linked with them saw
// std::filesystem::remove_all jump to address 0 (seen on the H200 host with
// LibTorch 2.11). Code that links LibTorch goes through this seam instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/fs/path.h"  // ParentDirectory, JoinPath: paths without std::filesystem

namespace dslaunch::runtime {

// A new file being written from its start. Not thread-safe.
class WritableFile {
 public:
  // Closes the file if Close() was not called; what was written stays,
  // unsynced (a caller that fails halfway removes the file itself).
  virtual ~WritableFile() = default;

  // Appends all of `data` or fails; writes may be buffered until Sync/Close.
  virtual absl::Status Append(absl::string_view data) = 0;
  // Writes all of `data` at byte `offset` from the file's start (pwrite),
  // over what is there or past the end (a gap reads as zeros). Appended
  // bytes still buffered go to the system first, so the two mix; the next
  // Append still goes at the end of what was appended, not after this.
  virtual absl::Status WriteAt(uint64_t offset, absl::string_view data) = 0;
  // Hands the buffered bytes to the operating system: other processes read
  // them, a crash of this one loses none; not durable (no fsync).
  virtual absl::Status Flush() = 0;
  // Makes every appended byte durable (flush, then fsync).
  virtual absl::Status Sync() = 0;
  // Flushes and closes; reports the errors of delayed writes (NFS, FUSE).
  // REQUIRES: called at most once; nothing is appended afterwards.
  virtual absl::Status Close() = 0;

  virtual const std::string& path() const = 0;
};

// A file read from its start. Not thread-safe.
class SequentialFile {
 public:
  virtual ~SequentialFile() = default;
  // Up to `size` bytes into `buffer`; 0 at the end of the file.
  virtual absl::StatusOr<size_t> Read(char* buffer, size_t size) = 0;
  virtual const std::string& path() const = 0;
};

// A file read at any offset (a checkpoint's archive, read as its index
// directs). Thread-safe: reads do not share a position.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Up to `size` bytes at `offset` into `buffer`; fewer only at the end.
  virtual absl::StatusOr<size_t> Read(uint64_t offset, char* buffer, size_t size) const = 0;
  virtual int64_t size() const = 0;  // when it was opened
  virtual const std::string& path() const = 0;
};

// A whole file mapped read-only (a prepared dataset). An empty file maps to
// data() == nullptr, size() == 0. Immutable, so thread-safe.
class ReadOnlyMemoryRegion {
 public:
  virtual ~ReadOnlyMemoryRegion() = default;
  virtual const uint8_t* data() const = 0;
  virtual size_t size() const = 0;
};

enum class FileType { kRegular, kDirectory, kOther };

struct FileInfo {
  FileType type = FileType::kOther;
  int64_t size = 0;
  int64_t modification_time_ns = 0;
};

// Implementations are thread-safe: several threads (ranks of a test, the
// data loader) may call one FileSystem at once.
class FileSystem {
 public:
  static constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

  // The POSIX file system; lives as long as the process.
  static FileSystem& Default();

  virtual ~FileSystem() = default;

  // Creates `path`, or truncates it when it exists.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  // Opens `path` for appending, creating it when it does not exist.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) = 0;
  virtual absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) = 0;
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) = 0;
  virtual absl::StatusOr<std::unique_ptr<ReadOnlyMemoryRegion>> MapReadOnly(const std::string& path) = 0;
  // A regular file, whole. NotFound when missing; FailedPrecondition when it
  // is not a regular file (a FIFO is refused, not waited on) or larger than
  // `max_bytes`.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes) = 0;
  absl::StatusOr<std::string> ReadFile(const std::string& path) { return ReadFile(path, kNoLimit); }
  // NotFound when nothing is at `path`. Follows symbolic links.
  virtual absl::StatusOr<FileInfo> Stat(const std::string& path) = 0;
  // mkdir -p; an existing folder is not an error.
  virtual absl::Status CreateDirectories(const std::string& path) = 0;
  // Removes a file; a missing one is not an error.
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  // rm -rf; a missing path is not an error.
  virtual absl::Status RemoveTree(const std::string& path) = 0;
  // Renames `from` to `to`, replacing `to` atomically when it is a file (or
  // an empty folder).
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // The names in a folder, without . and .., in no particular order.
  virtual absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) = 0;
  // fsyncs a folder, so that the renames and creations in it are durable.
  virtual absl::Status SyncDirectory(const std::string& path) = 0;

  // Whether anything is at `path` (a Stat that succeeds).
  bool Exists(const std::string& path);
  bool IsDirectory(const std::string& path);
};

// Writes `content` to `path` through `path`.tmp: append, fsync, close,
// rename, fsync of the folder, every step checked. On failure the temporary
// file is removed and `path` is as it was.
absl::Status WriteFileAtomically(FileSystem& fs, const std::string& path, absl::string_view content);

}  // namespace dslaunch::runtime
