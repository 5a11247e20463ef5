// Check macros that return a Status instead of aborting (STYLE.md 3).
#pragma once

#include <cerrno>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dslaunch {

// A Status for a failed system call: "<what>: <strerror(errno)>" with a code
// that says whether retrying can help.
absl::Status ErrnoStatus(absl::string_view what, int err = errno);

}  // namespace dslaunch

#define DS_STATUS_CONCAT_INNER(a, b) a##b
#define DS_STATUS_CONCAT(a, b) DS_STATUS_CONCAT_INNER(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define DS_RETURN_IF_ERROR(expr)                      \
  do {                                                \
    ::absl::Status ds_status_ = (expr);               \
    if (!ds_status_.ok()) return ds_status_;          \
  } while (0)

// `DS_ASSIGN_OR_RETURN(auto x, StatusOrExpr)`: binds the value or returns the error.
#define DS_ASSIGN_OR_RETURN(lhs, expr) \
  DS_ASSIGN_OR_RETURN_IMPL(DS_STATUS_CONCAT(ds_statusor_, __LINE__), lhs, expr)
#define DS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(*tmp)
