// The controller's journal: what a new dslaunch needs to take over a job
// whose dslaunch died while its ranks run on agents that outlive it
// (Note [Controller failover], agent/agent_service.cc).
//
// JOB_DIR/controller.journal (mode 0600: it holds the job's credentials) is
// one record per line, appended as things happen, each line written whole
// with one write(2), so a controller killed at any moment leaves every
// record before it intact:
//   start      the command line and the folder it ran in, the job id, its
//              credential, the store's token and address
//   attempt    an attempt began (its number, world size and hosts)
//   attached   a resumed controller attached to an attempt
//   ended      an attempt's end (its report's end, exit code, cause)
//   committed  the newest committed checkpoint of an ended attempt
//   put, del, drop, token
//              every change of the rendezvous store, in the order the
//              store made them (its write-ahead log), so the new store holds
//              what the old one held, attempt tokens included
//   job_end    the job is over: nothing to resume
// Fields are tab-separated and C-escaped (absl::CEscape).
//
// Thread-safe: Append may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "launcher/attempt_report.h"
#include "launcher/job_event_log.h"
#include "launcher/store_change.h"

namespace dslaunch {

inline constexpr char kControllerJournalFile[] = "controller.journal";

class ControllerJournal {
 public:
  // A new journal (an existing one is replaced), or one to append to (a
  // resumed controller's).
  static absl::StatusOr<std::unique_ptr<ControllerJournal>> Create(const std::string& path);
  static absl::StatusOr<std::unique_ptr<ControllerJournal>> Reopen(const std::string& path);
  ~ControllerJournal();
  ControllerJournal(const ControllerJournal&) = delete;
  ControllerJournal& operator=(const ControllerJournal&) = delete;

  void Append(const std::string& kind, const std::vector<std::string>& fields);
  // OK, or the first write error (later records are still attempted).
  absl::Status status() const;
  const std::string& path() const { return path_; }

 private:
  ControllerJournal(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;
  const int fd_;
  mutable std::mutex mu_;
  absl::Status first_error_;  // guarded by mu_
};

void JournalStoreChange(ControllerJournal& journal, const StoreChange& change);

// The journal's first record: who the job is and how its ranks reach the store.
struct JournaledIdentity {
  std::vector<std::string> argv;  // dslaunch's command line, argv[0] included
  std::string job_id;
  std::string job_credential;
  std::string store_token;
  std::string store_address;
  std::string working_dir;  // where dslaunch ran: relative paths of argv are relative to it
};
void JournalJobStart(ControllerJournal& journal, const JournaledIdentity& identity);

// What a journal says of its job, read back by dslaunch --resume_job.
struct JournaledJob {
  JournaledIdentity identity;
  int attempt = -1;      // the newest attempt begun; -1: none
  int world_size = 0;    // its world size
  std::vector<std::string> hosts;  // its hosts (fewer than planned after an elastic shrink)
  std::vector<AttemptReport> ended;  // the attempts that ended, in order
  std::string committed_tag;         // of the ended attempts, the newest
  std::vector<StoreChange> store_changes;
  bool job_ended = false;
};
// Errors name the file and line of a record that cannot be read.
absl::StatusOr<JournaledJob> ReadControllerJournal(const std::string& path);

// The job's event log, with the events a takeover needs also written to the
// journal (attempt starts and ends, checkpoints committed, the job's end).
class JournalingEventLog final : public JobEventLog {
 public:
  // `inner` (may be null) gets every event; both must outlive this object.
  JournalingEventLog(JobEventLog* inner, ControllerJournal* journal) : inner_(inner), journal_(journal) {}
  void Append(const JobEvent& event) override;

 private:
  JobEventLog* const inner_;
  ControllerJournal* const journal_;
};

}  // namespace dslaunch
