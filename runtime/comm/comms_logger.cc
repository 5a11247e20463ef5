#include "runtime/comm/comms_logger.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dslaunch::runtime {
namespace {

// DeepSpeed's convert_size: "4.0 MB" (powers of 1024, its unit names).
std::string SizeText(int64_t bytes) {
  static const char* const kUnits[] = {"B", "KB", "MB", "GB", "TB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

// The mean without the lowest and highest 10% (scipy's trim_mean(·, 0.1)).
double TrimmedMean(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t cut = static_cast<size_t>(values.size() * 0.1);
  const auto first = values.begin() + cut, last = values.end() - cut;
  return std::accumulate(first, last, 0.0) / static_cast<double>(last - first);
}

}  // namespace

CommsLogger::CommsLogger(CommsLoggerOptions options, std::function<void(const std::string&)> print)
    : options_(std::move(options)), print_(std::move(print)) {}

bool CommsLogger::Wants(const char* op) const {
  if (options_.prof_all) return true;
  return std::find(options_.prof_ops.begin(), options_.prof_ops.end(), op) != options_.prof_ops.end();
}

std::pair<double, double> CommsLogger::Bandwidth(const std::string& op, int group_size, int64_t bytes,
                                                 double seconds) {
  if (seconds <= 0) return {0, 0};
  const double n = std::max(1, group_size);
  const double per_second = bytes / seconds;
  double algbw = per_second, busbw = per_second;
  if (op == "all_reduce") {
    algbw = 2 * per_second;
    busbw = per_second * 2 * (n - 1) / n;
  } else if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") {
    busbw = per_second * (n - 1) / n;
  }
  return {algbw * 8 / 1e9, busbw * 8 / 1e9};
}

void CommsLogger::Record(const char* op, const std::string& group, int group_size, int64_t bytes, double seconds) {
  const auto [algbw, busbw] = Bandwidth(op, group_size, bytes, seconds);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Calls& calls = calls_[op][bytes];
    calls.seconds.push_back(seconds);
    calls.algbw.push_back(algbw);
    calls.busbw.push_back(busbw);
  }
  if (options_.verbose && print_) {
    print_(absl::StrFormat("comm op: %s | group: %s (%d ranks) | time (ms): %.2f | msg size: %s | algbw (Gbps): %.2f "
                           "| busbw (Gbps): %.2f",
                           op, group, group_size, seconds * 1e3, SizeText(bytes), algbw, busbw));
  }
}

std::string CommsLogger::Summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (calls_.empty()) return "";
  std::string out = absl::StrFormat("%-20s %-16s %8s %18s %16s %16s %17s\n", "Comm. Op", "Message Size", "Count",
                                    "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)");
  for (const auto& [op, sizes] : calls_) {
    absl::StrAppend(&out, op, "\n");
    for (const auto& [bytes, calls] : sizes) {
      const double total = std::accumulate(calls.seconds.begin(), calls.seconds.end(), 0.0);
      absl::StrAppendFormat(&out, "%-20s %-16s %8d %18.2f %16.2f %16.2f %17.2f\n", "", SizeText(bytes),
                            calls.seconds.size(), total * 1e3, TrimmedMean(calls.seconds) * 1e3,
                            TrimmedMean(calls.algbw), TrimmedMean(calls.busbw));
    }
  }
  return out;
}

}  // namespace dslaunch::runtime
