// Reading a small input file (hostfile, job file, ds_config, token file,
// .deepspeed_env) whole, or refusing it by name.
//
// Note [Bounded input files]
// Every input a user names is read through ReadConfigFile, so that no input
// can hang or exhaust the process before its first line is parsed:
//  - the file is opened with O_NONBLOCK and checked with fstat before any
//    read, so a FIFO nobody writes to, a device (/dev/zero, /dev/urandom, a
//    tty), a socket or a directory is refused by name ("is a FIFO, not a
//    regular file") instead of blocking or streaming forever;
//  - a regular file larger than the caller's limit is refused with its size
//    and the limit, before it is read; reading also stops one byte past the
//    limit, for files that grow or report no size (/proc);
//  - every refusal names the file and what it was meant to be.
// The limits themselves are in the table of docs/inputs.md.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dslaunch {

// The limit for text inputs that people write by hand: hostfiles, job files,
// ds_configs, .deepspeed_env. A file this large is not a config.
inline constexpr size_t kMaxConfigFileBytes = size_t{4} << 20;  // 4 MiB

// Reads `path` whole. `what` names the file's role in every message
// ("hostfile", "job file"); messages read "<what> <path>: <problem>".
// Errors: NotFound (missing), PermissionDenied, InvalidArgument (not a
// regular file; larger than `max_bytes`), Internal (other read errors).
absl::StatusOr<std::string> ReadConfigFile(const std::string& path, absl::string_view what,
                                           size_t max_bytes = kMaxConfigFileBytes);

// "a FIFO", "a directory", "a character device", ...: how a file of this
// st_mode is named in messages.
std::string DescribeFileType(unsigned int st_mode);

}  // namespace dslaunch
