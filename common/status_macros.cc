#include "common/status_macros.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace dslaunch {

absl::Status ErrnoStatus(absl::string_view what, int err) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EAGAIN:
    case EINTR:
    case EADDRINUSE:
      return absl::UnavailableError(message);
    case EINVAL:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace dslaunch
