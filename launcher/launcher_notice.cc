#include "launcher/launcher_notice.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace dslaunch {

void Notice(const std::string& message) {
  std::string line = absl::StrCat("dslaunch: ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

int UsageError(const absl::Status& status) {
  Notice(std::string(status.message()));
  return kUsageError;
}

}  // namespace dslaunch
