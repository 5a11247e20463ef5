#include "common/log.h"

#include <unistd.h>

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace dslaunch {
namespace {

std::mutex& NameMutex() {
  static std::mutex mu;
  return mu;
}
std::string& ProgramName() {
  static std::string name = "dslaunch";
  return name;
}

}  // namespace

void SetLogProgramName(absl::string_view name) {
  std::lock_guard<std::mutex> lock(NameMutex());
  ProgramName() = std::string(name);
}

void LogLine(absl::string_view message) {
  std::string name;
  {
    std::lock_guard<std::mutex> lock(NameMutex());
    name = ProgramName();
  }
  std::string line = absl::StrCat(absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone()),
                                  " ", name, ": ", message, "\n");
  // One write(2): atomic for pipes up to PIPE_BUF and good enough for terminals.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace dslaunch
