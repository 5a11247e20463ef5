#include "runtime/monitor/csv_monitor.h"

#include <charconv>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {

std::string CsvMonitorFileName(const std::string& metric) {
  std::string name = metric;
  for (char& c : name) {
    if (c == '/' || c == ' ') c = '_';
  }
  return name + ".csv";
}

std::string ShortestDouble(double value) {
  // Python's repr() of a float, which DeepSpeed's csv writer writes: the
  // shortest digits that read back as the same double, in fixed notation
  // for exponents -4 to 15 (with ".0" when integral), else scientific with
  // at least two exponent digits.
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  const std::string scientific(buffer, result.ptr);  // "-d.ddde-05"
  const size_t e = scientific.find('e');
  std::string sign, digits;
  for (size_t i = 0; i < e; ++i) {
    if (scientific[i] == '-') sign = "-";
    if (scientific[i] >= '0' && scientific[i] <= '9') digits.push_back(scientific[i]);
  }
  int exponent = 0;
  (void)std::from_chars(scientific.data() + e + (scientific[e + 1] == '+' ? 2 : 1),
                        scientific.data() + scientific.size(), exponent);
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) return absl::StrCat(sign, "0.", std::string(-exponent - 1, '0'), digits);
    const size_t whole = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= whole) return absl::StrCat(sign, digits, std::string(whole - digits.size(), '0'), ".0");
    return absl::StrCat(sign, digits.substr(0, whole), ".", digits.substr(whole));
  }
  const std::string mantissa = digits.size() == 1 ? digits : absl::StrCat(digits.substr(0, 1), ".", digits.substr(1));
  return absl::StrCat(sign, mantissa, "e", exponent < 0 ? "-" : "+", std::abs(exponent) < 10 ? "0" : "",
                      std::abs(exponent));
}

absl::StatusOr<WritableFile*> CsvMonitor::FileFor(const std::string& metric) {
  if (auto it = files_.find(metric); it != files_.end()) return it->second.get();
  const std::string path = absl::StrCat(folder_, "/", CsvMonitorFileName(metric));
  const size_t slash = metric.rfind('/');
  const std::string header =
      absl::StrCat("step,", slash == std::string::npos ? metric : metric.substr(slash + 1), "\n");
  std::string kept;
  if (fs_.Exists(path)) {
    // Note [CSV monitor files]: an earlier attempt's file keeps its header
    // and the rows this attempt resumes after.
    DS_ASSIGN_OR_RETURN(std::string existing, fs_.ReadFile(path));
    bool first = true;
    for (absl::string_view line : absl::StrSplit(existing, '\n', absl::SkipEmpty())) {
      if (first) {
        first = false;
        if (absl::StartsWith(line, "step,")) {
          kept.append(line.data(), line.size()).push_back('\n');
          continue;
        }
      }
      int64_t step = 0;
      const size_t comma = line.find(',');
      if (comma == absl::string_view::npos || !absl::SimpleAtoi(line.substr(0, comma), &step)) {
        return absl::DataLossError(absl::StrCat(path, ": line \"", line,
                                                "\" is not a \"step,value\" row of a csv_monitor file; move the "
                                                "file away or set csv_monitor.output_path to another folder"));
      }
      if (step <= resume_after_) kept.append(line.data(), line.size()).push_back('\n');
    }
    if (kept != existing) DS_RETURN_IF_ERROR(WriteFileAtomically(fs_, path, kept));
  }
  DS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, fs_.NewAppendableFile(path));
  if (kept.empty()) DS_RETURN_IF_ERROR(file->Append(header));
  WritableFile* raw = file.get();
  files_.emplace(metric, std::move(file));
  return raw;
}

absl::Status CsvMonitor::Write(const std::vector<MonitorEvent>& events) {
  for (const MonitorEvent& event : events) {
    DS_ASSIGN_OR_RETURN(WritableFile * file, FileFor(event.name));
    DS_RETURN_IF_ERROR(file->Append(absl::StrCat(event.step, ",", ShortestDouble(event.value), "\n")));
  }
  return absl::OkStatus();
}

absl::Status CsvMonitor::Flush() {
  for (auto& [metric, file] : files_) DS_RETURN_IF_ERROR(file->Flush());
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
