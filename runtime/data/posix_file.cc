#include "runtime/data/posix_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace {

// Large enough that writes are few, small enough to not matter in memory.
constexpr size_t kWriteBufferBytes = 1 << 20;

absl::Status Errno(absl::string_view what, const std::string& path) {
  int err = errno;
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

std::string ParentDirectory(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::StatusOr<std::unique_ptr<BufferedFileWriter>> BufferedFileWriter::Create(
    const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", path);
  return std::unique_ptr<BufferedFileWriter>(new BufferedFileWriter(path, fd));
}

BufferedFileWriter::BufferedFileWriter(std::string path, int fd)
    : path_(std::move(path)), fd_(fd) {
  buffer_.reserve(kWriteBufferBytes);
}

BufferedFileWriter::~BufferedFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status BufferedFileWriter::Append(const void* data, size_t size) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
  if (buffer_.size() + size > kWriteBufferBytes) {
    absl::Status flushed = Flush();
    if (!flushed.ok()) return flushed;
  }
  buffer_.append(static_cast<const char*>(data), size);
  return absl::OkStatus();
}

absl::Status BufferedFileWriter::Flush() {
  const char* p = buffer_.data();
  size_t left = buffer_.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot write", path_);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status BufferedFileWriter::Sync() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
  absl::Status flushed = Flush();
  if (!flushed.ok()) return flushed;
  if (::fsync(fd_) != 0) return Errno("cannot fsync", path_);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Errno("cannot close", path_);
  return absl::OkStatus();
}

absl::Status RenameFile(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return Errno("cannot rename", absl::StrCat(from, " to ", to));
  }
  return absl::OkStatus();
}

absl::Status RemoveFileIfExists(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("cannot remove", path);
  return absl::OkStatus();
}

absl::Status SyncParentDirectory(const std::string& path) {
  std::string dir = ParentDirectory(path);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", dir);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return absl::ErrnoToStatus(err, absl::StrCat("cannot fsync directory ", dir));
  return absl::OkStatus();
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status status = Errno("cannot stat", path);
    ::close(fd);
    return status;
  }
  size_t size = static_cast<size_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      absl::Status status = Errno("cannot mmap", path);
      ::close(fd);
      return status;
    }
  }
  ::close(fd);  // the mapping keeps the file alive
  return std::unique_ptr<MappedFile>(
      new MappedFile(path, static_cast<const uint8_t*>(data), size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  std::string contents;
  char chunk[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status status = Errno("cannot read", path);
      ::close(fd);
      return status;
    }
    if (n == 0) break;
    contents.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  return contents;
}

}  // namespace dslaunch::runtime
