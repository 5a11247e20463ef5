#include "common/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dslaunch {
namespace {

// "4 MiB" for whole MiB, else the bytes.
std::string DescribeBytes(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) {
    return absl::StrCat(bytes >> 20, " MiB");
  }
  return absl::StrCat(bytes, " bytes");
}

absl::Status NotRegular(absl::string_view what, const std::string& path, unsigned int mode) {
  return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": is ", DescribeFileType(mode),
                                                 ", not a regular file"));
}

absl::Status TooLarge(absl::string_view what, const std::string& path, absl::string_view size,
                      size_t max_bytes) {
  return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": ", size, "; the limit for a ",
                                                 what, " is ", DescribeBytes(max_bytes)));
}

}  // namespace

std::string DescribeFileType(unsigned int st_mode) {
  if (S_ISDIR(st_mode)) return "a directory";
  if (S_ISFIFO(st_mode)) return "a FIFO";
  if (S_ISCHR(st_mode)) return "a character device";
  if (S_ISBLK(st_mode)) return "a block device";
  if (S_ISSOCK(st_mode)) return "a socket";
  if (S_ISREG(st_mode)) return "a regular file";
  return "not a file";
}

absl::StatusOr<std::string> ReadConfigFile(const std::string& path, absl::string_view what,
                                           size_t max_bytes) {
  const std::string name = absl::StrCat(what, " ", path);
  // Note [Bounded input files]: the type is checked before the file is
  // opened, so that no device is ever opened (some act on open), and again on
  // the descriptor, opened non-blocking, for a path swapped in between.
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return ErrnoStatus(name);
  if (!S_ISREG(info.st_mode)) return NotRegular(what, path, info.st_mode);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return ErrnoStatus(name);
  auto fail = [fd](absl::Status status) {
    ::close(fd);
    return status;
  };
  if (::fstat(fd, &info) != 0) return fail(ErrnoStatus(name));
  if (!S_ISREG(info.st_mode)) return fail(NotRegular(what, path, info.st_mode));
  if (info.st_size < 0 || static_cast<uint64_t>(info.st_size) > max_bytes) {
    return fail(TooLarge(what, path, absl::StrCat(info.st_size, " bytes"), max_bytes));
  }
  std::string content;
  content.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(ErrnoStatus(absl::StrCat("read ", name)));
    }
    if (n == 0) break;
    content.append(buffer, static_cast<size_t>(n));
    if (content.size() > max_bytes) {
      // A file that grew while read, or reports no size (procfs).
      return fail(TooLarge(what, path, absl::StrCat("more than ", max_bytes, " bytes"), max_bytes));
    }
  }
  ::close(fd);
  return content;
}

}  // namespace dslaunch
