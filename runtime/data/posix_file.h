// The few POSIX file operations the data module needs, each returning a
// Status that names the file: buffered writing with fsync, atomic rename,
// read-only memory maps and whole-file reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dslaunch::runtime {

// Appends bytes to a new file through a user-space buffer. Sync() makes the
// bytes durable (fsync) and closes the file. Thread-compatible.
class BufferedFileWriter {
 public:
  // Creates (or truncates) `path`.
  static absl::StatusOr<std::unique_ptr<BufferedFileWriter>> Create(const std::string& path);
  ~BufferedFileWriter();  // closes without syncing when Sync() was not called

  BufferedFileWriter(const BufferedFileWriter&) = delete;
  BufferedFileWriter& operator=(const BufferedFileWriter&) = delete;

  absl::Status Append(const void* data, size_t size);
  // Flushes the buffer, fsyncs and closes. REQUIRES: called at most once.
  absl::Status Sync();

  const std::string& path() const { return path_; }

 private:
  BufferedFileWriter(std::string path, int fd);
  absl::Status Flush();

  std::string path_;
  int fd_;
  std::string buffer_;
};

// Renames `from` to `to`, replacing `to` atomically when it exists.
absl::Status RenameFile(const std::string& from, const std::string& to);

// Removes `path`; a file that does not exist is not an error.
absl::Status RemoveFileIfExists(const std::string& path);

// Fsyncs the directory holding `path`, so that a rename into it is durable.
absl::Status SyncParentDirectory(const std::string& path);

bool FileExists(const std::string& path);

// A read-only, private memory map of a whole file. An empty file maps to
// data() == nullptr, size() == 0. Immutable, so thread-safe.
class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace dslaunch::runtime
