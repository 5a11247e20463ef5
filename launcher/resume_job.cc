#include "launcher/resume_job.h"

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace dslaunch {

absl::StatusOr<ResumedJob> ReadJobToResume(const std::string& job_dir) {
  ResumedJob resumed;
  resumed.journal_path = absl::StrCat(job_dir, "/", kControllerJournalFile);
  if (!std::filesystem::exists(resumed.journal_path)) {
    return absl::NotFoundError(absl::StrCat("--resume_job: ", resumed.journal_path,
                                            " does not exist (dslaunch journals a job run with --journal, "
                                            "--agents and --log_dir; JOB_DIR is that --log_dir/JOB_ID)"));
  }
  auto journaled = ReadControllerJournal(resumed.journal_path);
  if (!journaled.ok()) return journaled.status();
  resumed.journaled = std::move(*journaled);
  const JournaledIdentity& identity = resumed.journaled.identity;
  if (resumed.journaled.job_ended) {
    return absl::FailedPreconditionError(
        absl::StrCat("--resume_job: job ", identity.job_id, " is over (", resumed.journal_path, "); nothing to resume"));
  }
  if (resumed.journaled.attempt < 0) {
    return absl::FailedPreconditionError(absl::StrCat("--resume_job: job ", identity.job_id,
                                                      " never started an attempt; run it again instead"));
  }
  auto options = ParseLauncherOptions(identity.argv);
  if (!options.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--resume_job: the journaled command line no longer parses: ",
                                                   options.status().message()));
  }
  if (options->agents.empty()) {
    return absl::FailedPreconditionError(
        "--resume_job: the job's agents were started by the dslaunch that died, and died with it; only a job "
        "run on --agents (agents that outlive dslaunch) can be taken over");
  }
  resumed.options = std::move(*options);
  resumed.options.job_id = identity.job_id;
  return resumed;
}

}  // namespace dslaunch
