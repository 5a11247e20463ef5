#include "common/status_macros.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace dslaunch {

absl::Status ErrnoStatus(absl::string_view what, int err) {
  // "write F: No space left on device (ENOSPC)": the errno's name is what an
  // operator searches for.
  const char* name = ::strerrorname_np(err);
  std::string message = absl::StrCat(what, ": ", std::strerror(err), name != nullptr ? absl::StrCat(" (", name, ")") : "");
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
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
