// dslaunch --resume_job JOB_DIR (Note [Controller failover]): reads the
// journal a dead controller left in JOB_DIR and gives back the job's own
// command line, parsed, with what the new controller must keep from the old
// one (the job's id, credential, store token and address, its attempts).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "launcher/controller_journal.h"
#include "launcher/launcher_options.h"

namespace dslaunch {

struct ResumedJob {
  std::string journal_path;
  JournaledJob journaled;
  LauncherOptions options;  // from the journaled command line; job_id set
};

// Refuses, saying why, a journal of a job that is over, that never began an
// attempt, or whose command line did not name running agents (--agents):
// agents dslaunch starts itself die with it.
absl::StatusOr<ResumedJob> ReadJobToResume(const std::string& job_dir);

}  // namespace dslaunch
