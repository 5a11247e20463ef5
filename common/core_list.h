// CPU core lists as DeepSpeed's --bind_core_list and Linux's cpulist files
// write them: "1,3-5,7" is cores 1, 3, 4, 5 and 7.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch {

// Ascending and without duplicates. `what` names the flag or file in errors.
absl::StatusOr<std::vector<int>> ParseCoreList(const std::string& text, const std::string& what);

// The inverse: runs of consecutive cores as "a-b" ("1,3-5,7").
std::string FormatCoreList(const std::vector<int>& cores);

}  // namespace dslaunch
