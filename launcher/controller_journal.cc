#include "launcher/controller_journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dslaunch {
namespace {

absl::StatusOr<int> OpenJournalFile(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_WRONLY | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open the controller journal ", path, ": ", std::strerror(errno)));
  }
  // A file that existed keeps its mode: no one else may read the credentials.
  if (::fchmod(fd, 0600) != 0) {
    const int error = errno;
    ::close(fd);
    return absl::PermissionDeniedError(
        absl::StrCat("cannot make the controller journal ", path, " private: ", std::strerror(error)));
  }
  return fd;
}

constexpr char kStart[] = "start";
constexpr char kAttempt[] = "attempt";
constexpr char kAttached[] = "attached";
constexpr char kEnded[] = "ended";
constexpr char kCommitted[] = "committed";
constexpr char kPut[] = "put";
constexpr char kDelete[] = "del";
constexpr char kDrop[] = "drop";
constexpr char kToken[] = "token";
constexpr char kJobEnd[] = "job_end";

}  // namespace

absl::StatusOr<std::unique_ptr<ControllerJournal>> ControllerJournal::Create(const std::string& path) {
  auto fd = OpenJournalFile(path, O_CREAT | O_TRUNC);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<ControllerJournal>(new ControllerJournal(path, *fd));
}

absl::StatusOr<std::unique_ptr<ControllerJournal>> ControllerJournal::Reopen(const std::string& path) {
  auto fd = OpenJournalFile(path, 0);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<ControllerJournal>(new ControllerJournal(path, *fd));
}

ControllerJournal::~ControllerJournal() { ::close(fd_); }

void ControllerJournal::Append(const std::string& kind, const std::vector<std::string>& fields) {
  std::string line = kind;
  for (const std::string& field : fields) absl::StrAppend(&line, "\t", absl::CEscape(field));
  line += '\n';
  std::lock_guard<std::mutex> lock(mu_);
  // One write per record: a controller killed mid-run leaves whole lines
  // (O_APPEND; the page cache keeps what a killed process wrote).
  const ssize_t written = ::write(fd_, line.data(), line.size());
  if (written != static_cast<ssize_t>(line.size()) && first_error_.ok()) {
    first_error_ = absl::DataLossError(absl::StrCat("cannot write the controller journal ", path_, ": ",
                                                    written < 0 ? std::strerror(errno) : "short write"));
  }
}

absl::Status ControllerJournal::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_error_;
}

void JournalStoreChange(ControllerJournal& journal, const StoreChange& change) {
  switch (change.kind) {
    case StoreChange::Kind::kPut:
      journal.Append(kPut, {change.key, change.value});
      break;
    case StoreChange::Kind::kDelete:
      journal.Append(kDelete, {change.key});
      break;
    case StoreChange::Kind::kDropAttempt:
      journal.Append(kDrop, {absl::StrCat(change.attempt)});
      break;
    case StoreChange::Kind::kAttemptToken:
      journal.Append(kToken, {absl::StrCat(change.attempt), change.value});
      break;
  }
}

void JournalJobStart(ControllerJournal& journal, const JournaledIdentity& identity) {
  std::vector<std::string> fields = {identity.job_id, identity.job_credential, identity.store_token,
                                     identity.store_address, identity.working_dir};
  fields.insert(fields.end(), identity.argv.begin(), identity.argv.end());
  journal.Append(kStart, fields);
}

absl::StatusOr<JournaledJob> ReadControllerJournal(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the controller journal ", path));
  JournaledJob job;
  std::string line;
  int number = 0;
  bool started = false;
  while (std::getline(in, line)) {
    ++number;
    auto bad = [&](absl::string_view why) {
      return absl::DataLossError(absl::StrCat(path, ":", number, ": ", why));
    };
    if (in.eof()) break;  // a last line without its newline was cut short by the crash: not a record
    std::vector<std::string> fields;
    for (absl::string_view raw : absl::StrSplit(line, '\t')) {
      std::string field;
      if (!absl::CUnescape(raw, &field)) return bad("a field is not C-escaped text");
      fields.push_back(std::move(field));
    }
    const std::string kind = fields.front();
    fields.erase(fields.begin());
    auto need = [&](size_t count) -> absl::Status {
      if (fields.size() < count) return bad(absl::StrCat("'", kind, "' needs ", count, " field(s)"));
      return absl::OkStatus();
    };
    // Attempts, world sizes and exit codes are never negative.
    auto number_at = [&](size_t at, int* out) -> absl::Status {
      if (!absl::SimpleAtoi(fields[at], out) || *out < 0) {
        return bad(absl::StrCat("'", fields[at], "' is not a number of 0 or more"));
      }
      return absl::OkStatus();
    };
    if (!started && kind != kStart) return bad("the journal does not begin with its job's start");
    absl::Status read;
    if (kind == kStart) {
      if (started) return bad("a second 'start'");
      if (read = need(6); !read.ok()) return read;
      started = true;
      job.identity.job_id = fields[0];
      job.identity.job_credential = fields[1];
      job.identity.store_token = fields[2];
      job.identity.store_address = fields[3];
      job.identity.working_dir = fields[4];
      job.identity.argv.assign(fields.begin() + 5, fields.end());
    } else if (kind == kAttempt) {
      if (read = need(3); !read.ok()) return read;
      if (read = number_at(0, &job.attempt); !read.ok()) return read;
      if (read = number_at(1, &job.world_size); !read.ok()) return read;
      job.hosts = absl::StrSplit(fields[2], ',', absl::SkipEmpty());
    } else if (kind == kAttached) {
      // Nothing to restore: the attempt's own record came before.
    } else if (kind == kEnded) {
      if (read = need(5); !read.ok()) return read;
      AttemptReport report;
      if (read = number_at(0, &report.attempt); !read.ok()) return read;
      if (!AttemptEnd_Parse(fields[1], &report.end)) return bad(absl::StrCat("unknown attempt end '", fields[1], "'"));
      if (read = number_at(2, &report.exit_code); !read.ok()) return read;
      report.cause = fields[3];
      report.startup_error = fields[4];
      job.ended.push_back(std::move(report));
    } else if (kind == kCommitted) {
      if (read = need(1); !read.ok()) return read;
      job.committed_tag = fields[0];
    } else if (kind == kPut || kind == kDelete || kind == kDrop || kind == kToken) {
      StoreChange change;
      if (kind == kPut) {
        if (read = need(2); !read.ok()) return read;
        change.key = fields[0];
        change.value = fields[1];
      } else if (kind == kDelete) {
        if (read = need(1); !read.ok()) return read;
        change.kind = StoreChange::Kind::kDelete;
        change.key = fields[0];
      } else if (kind == kDrop) {
        if (read = need(1); !read.ok()) return read;
        change.kind = StoreChange::Kind::kDropAttempt;
        if (read = number_at(0, &change.attempt); !read.ok()) return read;
      } else {
        if (read = need(2); !read.ok()) return read;
        change.kind = StoreChange::Kind::kAttemptToken;
        if (read = number_at(0, &change.attempt); !read.ok()) return read;
        change.value = fields[1];
      }
      job.store_changes.push_back(std::move(change));
    } else if (kind == kJobEnd) {
      job.job_ended = true;
    } else {
      return bad(absl::StrCat("unknown record '", kind, "'"));
    }
  }
  if (!started) return absl::DataLossError(absl::StrCat(path, ": empty (the job never started?)"));
  return job;
}

void JournalingEventLog::Append(const JobEvent& event) {
  if (inner_ != nullptr) inner_->Append(event);
  const std::string& name = event.name();
  auto number = [&](absl::string_view key) { return absl::StrCat(event.GetInt(key).value_or(0)); };
  if (name == "attempt_start") {
    journal_->Append(kAttempt, {number("attempt"), number("world_size"), event.GetText("hosts").value_or("")});
  } else if (name == "attempt_attached") {
    journal_->Append(kAttached, {number("attempt")});
  } else if (name == "attempt_end") {
    journal_->Append(kEnded, {number("attempt"), event.GetText("end").value_or(""), number("exit_code"),
                              event.GetText("cause").value_or(""), event.GetText("startup_error").value_or("")});
  } else if (name == "checkpoint_committed") {
    journal_->Append(kCommitted, {event.GetText("tag").value_or("")});
  } else if (name == "job_end") {
    journal_->Append(kJobEnd, {});
  }
}

}  // namespace dslaunch
