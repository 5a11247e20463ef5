// The job's event log: one JSON object per line in DIR/<job_id>/events.jsonl
// with --log_dir, for operators to tail and for tools to read back.
//
//   {"time_us":1718000000123456, "event":"state", "state":"JOB_RUNNING", "attempt":0}
//
// Every line has "time_us" (Unix microseconds, controller's clock) and
// "event" first; the other fields depend on the event (docs/control-plane.md
// lists them). STYLE.md 4: JobEventLog is the interface; FileJobEventLog
// writes the file, NullJobEventLog drops everything, FakeJobEventLog
// (fake_job_event_log.h) records events for tests.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/json_quote.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dslaunch {

// One event: a name, a time and fields in the order they were added.
// Separate setters per type (no overloads) so that a string literal can never
// become a bool.
class JobEvent {
 public:
  using Value = std::variant<int64_t, std::string, bool>;

  explicit JobEvent(std::string name);  // stamped with the current time
  JobEvent(std::string name, int64_t time_us);

  JobEvent& Int(absl::string_view key, int64_t value);
  JobEvent& Text(absl::string_view key, absl::string_view value);
  JobEvent& Bool(absl::string_view key, bool value);

  const std::string& name() const { return name_; }
  int64_t time_us() const { return time_us_; }
  const std::vector<std::pair<std::string, Value>>& fields() const { return fields_; }

  // The field's value when it exists and has that type (for tests and tools).
  std::optional<int64_t> GetInt(absl::string_view key) const;
  std::optional<std::string> GetText(absl::string_view key) const;
  std::optional<bool> GetBool(absl::string_view key) const;

 private:
  const Value* Find(absl::string_view key) const;

  std::string name_;
  int64_t time_us_;
  std::vector<std::pair<std::string, Value>> fields_;
};

using ::dslaunch::JsonQuote;  // common/json_quote.h

// The event as one line of JSON, without the newline.
std::string FormatJobEvent(const JobEvent& event);

class JobEventLog {
 public:
  virtual ~JobEventLog() = default;
  // Never fails the job: a log that cannot be written must not stop training.
  virtual void Append(const JobEvent& event) = 0;
};

class NullJobEventLog final : public JobEventLog {
 public:
  void Append(const JobEvent&) override {}
};

// Appends to a file, one flushed line per event. Thread-safe.
class FileJobEventLog final : public JobEventLog {
 public:
  // Opens `path` for appending (a rerun with the same --job_id adds to it).
  static absl::StatusOr<std::unique_ptr<FileJobEventLog>> Open(const std::string& path);
  ~FileJobEventLog() override;

  void Append(const JobEvent& event) override;
  // OK, or the first write error (later events are still attempted).
  absl::Status status() const;

 private:
  FileJobEventLog(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  const std::string path_;
  mutable std::mutex mu_;
  std::FILE* const file_;                     // written under mu_
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dslaunch
