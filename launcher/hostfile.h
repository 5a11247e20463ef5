// The DeepSpeed hostfile: one host per line, "HOST slots=N", '#' comments and
// blank lines allowed.
//
//   # training cluster
//   worker-0 slots=8
//   worker-1 slots=8   # trailing comments are fine
//
// Every problem is an error that names the file, the line number and the text
// of the line, and no partial result is returned (DeepSpeed #5221, #3669).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch {

struct HostfileEntry {
  std::string host;
  int slots = 0;
  int line = 0;  // 1-based line number in the file
};

struct Hostfile {
  std::string path;  // as given; used in error messages
  std::vector<HostfileEntry> hosts;  // in file order
};

// Parses hostfile text. `path` is only used to name the file in errors. Every
// bad line is reported (one per line of the error message), not just the first:
// bad syntax, a host without slots, slots not a positive integer, a duplicate
// host (naming the line of the first occurrence), and a file with no host at all.
absl::StatusOr<Hostfile> ParseHostfile(std::string_view content, const std::string& path);

// Reads and parses `path`. A missing or unreadable file is an error naming it.
absl::StatusOr<Hostfile> ReadHostfile(const std::string& path);

}  // namespace dslaunch
