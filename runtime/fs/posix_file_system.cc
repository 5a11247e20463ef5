#include "runtime/fs/posix_file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/bounded_file.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {
namespace {

// Large enough that writes are few, small enough to not matter in memory.
constexpr size_t kWriteBufferBytes = 1 << 20;

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, bool appending)
      : path_(std::move(path)), fd_(fd), appending_(appending) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Append(absl::string_view data) override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("write ", path_, ": the file is closed"));
    if (buffer_.size() + data.size() > kWriteBufferBytes) {
      DS_RETURN_IF_ERROR(FlushBuffer());
      // A large piece goes straight to the file instead of through the buffer.
      if (data.size() > kWriteBufferBytes) return WriteAll(data);
    }
    buffer_.append(data.data(), data.size());
    return absl::OkStatus();
  }

  absl::Status WriteAt(uint64_t offset, absl::string_view data) override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("write ", path_, ": the file is closed"));
    // O_APPEND makes Linux's pwrite append whatever the offset.
    if (appending_) {
      return absl::FailedPreconditionError(absl::StrCat("write ", path_, " at an offset: opened for appending"));
    }
    DS_RETURN_IF_ERROR(FlushBuffer());
    while (!data.empty()) {
      const ssize_t n = ::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(absl::StrCat("write ", path_));
      }
      data.remove_prefix(static_cast<size_t>(n));
      offset += static_cast<uint64_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("fsync ", path_, ": the file is closed"));
    DS_RETURN_IF_ERROR(FlushBuffer());
    if (::fsync(fd_) != 0) return ErrnoStatus(absl::StrCat("fsync ", path_));
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("close ", path_, ": the file is closed"));
    absl::Status flushed = FlushBuffer();
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0 && flushed.ok()) return ErrnoStatus(absl::StrCat("close ", path_));
    return flushed;
  }

  const std::string& path() const override { return path_; }

  absl::Status Flush() override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("write ", path_, ": the file is closed"));
    return FlushBuffer();
  }

 private:
  absl::Status FlushBuffer() {
    absl::Status written = WriteAll(buffer_);
    buffer_.clear();
    return written;
  }

  absl::Status WriteAll(absl::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(absl::StrCat("write ", path_));
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  const std::string path_;
  int fd_;
  const bool appending_;  // O_APPEND: no WriteAt
  std::string buffer_;
};

class PosixSequentialFile final : public SequentialFile {
 public:
  PosixSequentialFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixSequentialFile() override { ::close(fd_); }

  absl::StatusOr<size_t> Read(char* buffer, size_t size) override {
    while (true) {
      const ssize_t n = ::read(fd_, buffer, size);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno != EINTR) return ErrnoStatus(absl::StrCat("read ", path_));
    }
  }
  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  const int fd_;
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd, int64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  absl::StatusOr<size_t> Read(uint64_t offset, char* buffer, size_t size) const override {
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pread(fd_, buffer + done, size - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(absl::StrCat("read ", path_));
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }
  int64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  const int fd_;
  const int64_t size_;
};

class PosixMappedRegion final : public ReadOnlyMemoryRegion {
 public:
  PosixMappedRegion(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  ~PosixMappedRegion() override {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  const uint8_t* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  const uint8_t* const data_;
  const size_t size_;
};

FileType TypeOf(mode_t mode) {
  if (S_ISREG(mode)) return FileType::kRegular;
  if (S_ISDIR(mode)) return FileType::kDirectory;
  return FileType::kOther;
}

}  // namespace

FileSystem& FileSystem::Default() {
  static PosixFileSystem* posix = new PosixFileSystem;  // never destroyed: used until exit
  return *posix;
}

absl::StatusOr<std::unique_ptr<WritableFile>> PosixFileSystem::NewWritableFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(absl::StrCat("create ", path));
  return std::make_unique<PosixWritableFile>(path, fd, /*appending=*/false);
}

absl::StatusOr<std::unique_ptr<WritableFile>> PosixFileSystem::NewAppendableFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open for appending ", path));
  return std::make_unique<PosixWritableFile>(path, fd, /*appending=*/true);
}

absl::StatusOr<std::unique_ptr<SequentialFile>> PosixFileSystem::NewSequentialFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open ", path));
  return std::make_unique<PosixSequentialFile>(path, fd);
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> PosixFileSystem::NewRandomAccessFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status failed = ErrnoStatus(absl::StrCat("stat ", path));
    ::close(fd);
    return failed;
  }
  return std::make_unique<PosixRandomAccessFile>(path, fd, static_cast<int64_t>(st.st_size));
}

absl::StatusOr<std::unique_ptr<ReadOnlyMemoryRegion>> PosixFileSystem::MapReadOnly(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status failed = ErrnoStatus(absl::StrCat("stat ", path));
    ::close(fd);
    return failed;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      absl::Status failed = ErrnoStatus(absl::StrCat("mmap ", path));
      ::close(fd);
      return failed;
    }
  }
  ::close(fd);  // the mapping keeps the file alive
  return std::make_unique<PosixMappedRegion>(static_cast<const uint8_t*>(data), size);
}

absl::StatusOr<std::string> PosixFileSystem::ReadFile(const std::string& path, int64_t max_bytes) {
  // O_NONBLOCK: a FIFO is refused below instead of blocking the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open ", path));
  auto fail = [fd](absl::Status status) {
    ::close(fd);
    return status;
  };
  struct stat st;
  if (::fstat(fd, &st) != 0) return fail(ErrnoStatus(absl::StrCat("stat ", path)));
  if (!S_ISREG(st.st_mode)) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat(path, " is ", DescribeFileType(st.st_mode), ", not a regular file")));
  }
  if (st.st_size > max_bytes) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat(path, " has ", static_cast<int64_t>(st.st_size), " bytes, more than the ", max_bytes, " expected")));
  }
  std::string content(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::read(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(ErrnoStatus(absl::StrCat("read ", path)));
    if (n == 0) break;  // shrank since fstat
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  content.resize(done);
  return content;
}

absl::StatusOr<FileInfo> PosixFileSystem::Stat(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(absl::StrCat("stat ", path));
  FileInfo info;
  info.type = TypeOf(st.st_mode);
  info.size = static_cast<int64_t>(st.st_size);
  info.modification_time_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return info;
}

absl::Status PosixFileSystem::CreateDirectories(const std::string& path) {
  if (path.empty() || IsDirectory(path)) return absl::OkStatus();
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) DS_RETURN_IF_ERROR(CreateDirectories(path.substr(0, slash)));
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus(absl::StrCat("mkdir ", path));
  return absl::OkStatus();
}

absl::Status PosixFileSystem::RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(absl::StrCat("remove ", path));
  return absl::OkStatus();
}

absl::Status PosixFileSystem::RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(absl::StrCat("stat ", path));
  }
  auto remove_one = [](const char* entry, const struct stat*, int, struct FTW*) -> int { return ::remove(entry); };
  if (::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0) {
    return ErrnoStatus(absl::StrCat("remove ", path));
  }
  return absl::OkStatus();
}

absl::Status PosixFileSystem::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoStatus(absl::StrCat("rename ", from, " to ", to));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> PosixFileSystem::ListDirectory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return ErrnoStatus(absl::StrCat("list ", path));
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(dir);
  return names;
}

absl::Status PosixFileSystem::SyncDirectory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open ", path));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus(absl::StrCat("fsync ", path), err);
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
