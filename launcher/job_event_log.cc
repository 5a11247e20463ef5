#include "launcher/job_event_log.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace dslaunch {
namespace {


}  // namespace

JobEvent::JobEvent(std::string name) : JobEvent(std::move(name), absl::ToUnixMicros(absl::Now())) {}

JobEvent::JobEvent(std::string name, int64_t time_us) : name_(std::move(name)), time_us_(time_us) {}

JobEvent& JobEvent::Int(absl::string_view key, int64_t value) {
  fields_.emplace_back(std::string(key), value);
  return *this;
}

JobEvent& JobEvent::Text(absl::string_view key, absl::string_view value) {
  fields_.emplace_back(std::string(key), std::string(value));
  return *this;
}

JobEvent& JobEvent::Bool(absl::string_view key, bool value) {
  fields_.emplace_back(std::string(key), value);
  return *this;
}

const JobEvent::Value* JobEvent::Find(absl::string_view key) const {
  for (const auto& [name, value] : fields_) {
    if (name == key) return &value;
  }
  return nullptr;
}

std::optional<int64_t> JobEvent::GetInt(absl::string_view key) const {
  const Value* value = Find(key);
  if (value == nullptr || !std::holds_alternative<int64_t>(*value)) return std::nullopt;
  return std::get<int64_t>(*value);
}

std::optional<std::string> JobEvent::GetText(absl::string_view key) const {
  const Value* value = Find(key);
  if (value == nullptr || !std::holds_alternative<std::string>(*value)) return std::nullopt;
  return std::get<std::string>(*value);
}

std::optional<bool> JobEvent::GetBool(absl::string_view key) const {
  const Value* value = Find(key);
  if (value == nullptr || !std::holds_alternative<bool>(*value)) return std::nullopt;
  return std::get<bool>(*value);
}


std::string FormatJobEvent(const JobEvent& event) {
  std::string line = absl::StrCat("{\"time_us\":", event.time_us(), ", \"event\":", JsonQuote(event.name()));
  for (const auto& [key, value] : event.fields()) {
    absl::StrAppend(&line, ", ", JsonQuote(key), ":");
    if (const auto* number = std::get_if<int64_t>(&value)) {
      absl::StrAppend(&line, *number);
    } else if (const auto* text = std::get_if<std::string>(&value)) {
      absl::StrAppend(&line, JsonQuote(*text));
    } else {
      absl::StrAppend(&line, std::get<bool>(value) ? "true" : "false");
    }
  }
  line += '}';
  return line;
}

absl::StatusOr<std::unique_ptr<FileJobEventLog>> FileJobEventLog::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) return ErrnoStatus(absl::StrCat("cannot open the event log ", path));
  return std::unique_ptr<FileJobEventLog>(new FileJobEventLog(path, file));
}

FileJobEventLog::~FileJobEventLog() { std::fclose(file_); }

void FileJobEventLog::Append(const JobEvent& event) {
  std::string line = FormatJobEvent(event);
  line += '\n';
  std::lock_guard<std::mutex> lock(mu_);
  // One flushed line per event: whoever tails the file sees whole lines at once.
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    if (first_error_.ok()) first_error_ = ErrnoStatus(absl::StrCat("cannot write the event log ", path_));
  }
}

absl::Status FileJobEventLog::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_error_;
}

}  // namespace dslaunch
