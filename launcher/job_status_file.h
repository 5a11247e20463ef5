// Where a running controller can be asked for its job's status.
//
// Note [Job status file]
// While a job runs, its controller keeps one small file per job in the run
// folder, `<run dir>/<job id>.status`: the job id, the address of the
// store's port (which also serves the Controller RPC), the controller's
// token, its pid and, with --tls_dir, that folder, one "key value" line each. `dslaunch status` reads it,
// so a user on the controller's machine needs no flag, token or port.
//   - The run folder is $DSLAUNCH_RUN_DIR, else $XDG_RUNTIME_DIR/dslaunch,
//     else /tmp/dslaunch-<uid>. It is made 0700; one that another user owns
//     or can read is refused (the files hold tokens), naming it.
//   - Each file is written 0600 under a temporary name and renamed in place,
//     and removed when the controller ends. A file whose pid is gone (the
//     controller was SIGKILLed) is stale: readers skip it and say so.
//   - A controller that cannot write its file still runs the job; it says
//     that `dslaunch status` will not find it, and why.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch {

inline constexpr char kRunDirVariable[] = "DSLAUNCH_RUN_DIR";

struct JobStatusFile {
  std::string job_id;
  std::string address;  // host:port of the Controller service
  std::string token;    // the controller's token
  int64_t pid = 0;      // the controller's
  std::string tls_dir;  // the controller's --tls_dir (Note [Mutual TLS]); empty: plaintext
  std::string path;     // where it was read from (readers)
};

// The run folder as the rules above choose it (not created).
std::string RunDirectory();

// Creates `dir` (0700) when missing, refuses one that is not safe, and
// writes the file of `file.job_id` atomically (0600). Returns its path.
absl::StatusOr<std::string> WriteJobStatusFile(const std::string& dir, const JobStatusFile& file);

// The job status files in `dir` whose controller is still alive, by job id;
// `stale` (may be null) receives the paths of those whose pid is gone.
// A missing folder is no jobs.
absl::StatusOr<std::vector<JobStatusFile>> ReadJobStatusFiles(const std::string& dir,
                                                              std::vector<std::string>* stale = nullptr);

// Removes the file at `path` when destroyed (the controller's end).
class ScopedJobStatusFile {
 public:
  explicit ScopedJobStatusFile(std::string path = "") : path_(std::move(path)) {}
  ScopedJobStatusFile(const ScopedJobStatusFile&) = delete;
  ScopedJobStatusFile& operator=(const ScopedJobStatusFile&) = delete;
  ScopedJobStatusFile(ScopedJobStatusFile&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  ScopedJobStatusFile& operator=(ScopedJobStatusFile&& other) noexcept {
    std::swap(path_, other.path_);
    return *this;
  }
  ~ScopedJobStatusFile();

 private:
  std::string path_;
};

}  // namespace dslaunch
