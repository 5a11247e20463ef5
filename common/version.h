// The version every dslaunch binary prints for --version (and dsagent's
// Describe reports), defined once.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/rank_contract.h"

namespace dslaunch {

inline constexpr char kDslaunchVersion[] = "0.1";

// "dsagent 0.1 (rank environment contract v1)"
inline std::string VersionLine(absl::string_view program) {
  return absl::StrCat(program, " ", kDslaunchVersion, " (rank environment contract v",
                      rank_env::kEnvVersion, ")");
}

}  // namespace dslaunch
