#include "runtime/checkpoint/checksummed_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

ChecksummedFileWriter::ChecksummedFileWriter(std::string path, int fd)
    : path_(std::move(path)), fd_(fd), hash_(std::make_unique<HashState>()) {
  XXH3_64bits_reset(&hash_->state);
}

ChecksummedFileWriter::~ChecksummedFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::unique_ptr<ChecksummedFileWriter>> ChecksummedFileWriter::Create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(absl::StrCat("create ", path));
  return std::unique_ptr<ChecksummedFileWriter>(new ChecksummedFileWriter(path, fd));
}

absl::Status ChecksummedFileWriter::Write(const void* data, size_t size) {
  if (!status_.ok()) return status_;
  const char* bytes = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    const ssize_t n = ::write(fd_, bytes, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      status_ = ErrnoStatus(absl::StrCat("write ", path_));
      return status_;
    }
    bytes += n;
    left -= static_cast<size_t>(n);
  }
  XXH3_64bits_update(&hash_->state, data, size);
  written_ += static_cast<int64_t>(size);
  return absl::OkStatus();
}

absl::StatusOr<FileDigest> ChecksummedFileWriter::Finish() {
  if (!status_.ok()) return status_;
  if (::fsync(fd_) != 0) status_ = ErrnoStatus(absl::StrCat("fsync ", path_));
  // close reports errors of delayed writes (NFS, some FUSE file systems).
  if (::close(fd_) != 0 && status_.ok()) status_ = ErrnoStatus(absl::StrCat("close ", path_));
  fd_ = -1;
  if (!status_.ok()) return status_;
  return FileDigest{written_, XXH3_64bits_digest(&hash_->state)};
}

absl::StatusOr<FileDigest> DigestFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open ", path));
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  std::vector<char> buffer(1 << 20);
  int64_t size = 0;
  while (true) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status failed = ErrnoStatus(absl::StrCat("read ", path));
      ::close(fd);
      return failed;
    }
    if (n == 0) break;
    XXH3_64bits_update(&state, buffer.data(), static_cast<size_t>(n));
    size += n;
  }
  ::close(fd);
  return FileDigest{size, XXH3_64bits_digest(&state)};
}

absl::Status SyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open ", path));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus(absl::StrCat("fsync ", path), err);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string temporary = path + ".tmp";
  absl::Status written = [&]() -> absl::Status {
    DS_ASSIGN_OR_RETURN(std::unique_ptr<ChecksummedFileWriter> writer, ChecksummedFileWriter::Create(temporary));
    DS_RETURN_IF_ERROR(writer->Write(content.data(), content.size()));
    DS_RETURN_IF_ERROR(writer->Finish().status());
    if (::rename(temporary.c_str(), path.c_str()) != 0) {
      return ErrnoStatus(absl::StrCat("rename ", temporary, " to ", path));
    }
    return absl::OkStatus();
  }();
  if (!written.ok()) {
    ::unlink(temporary.c_str());
    return written;
  }
  const size_t slash = path.find_last_of('/');
  return SyncPath(slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash)));
}

}  // namespace dslaunch::runtime
