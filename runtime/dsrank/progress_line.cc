#include "runtime/dsrank/progress_line.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dslaunch::runtime {

std::string OptimizerInUse(const DsConfig& ds) {
  const ZeroConfig& zero = ds.zero_optimization;
  std::string text = zero.stage > 0 ? absl::StrCat("ZeRO-", zero.stage) : "no ZeRO";
  if (zero.offload_optimizer.device != "none") {
    absl::StrAppend(&text, ", optimizer offloaded to ", zero.offload_optimizer.device);
  }
  if (zero.offload_param.device != "none") {
    absl::StrAppend(&text, ", parameters offloaded to ", zero.offload_param.device);
  }
  return text;
}

std::string ClockText(double seconds) {
  const int64_t whole = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  const int64_t hours = whole / 3600, minutes = whole / 60 % 60, rest = whole % 60;
  if (hours > 0) return absl::StrFormat("%d:%02d:%02d", hours, minutes, rest);
  return absl::StrFormat("%d:%02d", minutes, rest);
}

std::string ProgressText(int64_t step, int64_t first_step, int64_t total, double elapsed_seconds,
                         const std::string& optimizer) {
  const int64_t done_here = step - first_step + 1;
  const int64_t percent = total > 0 ? step * 100 / total : 100;
  std::string eta = "unknown";
  if (done_here > 0 && elapsed_seconds > 0) {
    eta = ClockText(elapsed_seconds / static_cast<double>(done_here) * static_cast<double>(std::max<int64_t>(0, total - step)));
  }
  return absl::StrCat(step, "/", total, " (", percent, "%) elapsed ", ClockText(elapsed_seconds), " eta ", eta,
                      " | ", optimizer);
}

}  // namespace dslaunch::runtime
