#include "launcher/job_event_log.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace dslaunch {
namespace {

// Length of the valid UTF-8 sequence at the start of `text`, or 0 when it is
// not one (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF).
size_t Utf8SequenceLength(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

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

std::string JsonQuote(absl::string_view text) {
  std::string out = "\"";
  out.reserve(text.size() + 2);
  while (!text.empty()) {
    const unsigned char c = static_cast<unsigned char>(text[0]);
    if (c >= 0x80) {
      size_t length = Utf8SequenceLength(text);
      if (length == 0) {
        out += "\\ufffd";
        length = 1;
      } else {
        out.append(text.data(), length);
      }
      text.remove_prefix(length);
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          absl::StrAppend(&out, absl::StrFormat("\\u%04x", c));
        } else {
          out += static_cast<char>(c);
        }
    }
    text.remove_prefix(1);
  }
  out += '"';
  return out;
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
