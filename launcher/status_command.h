// `dslaunch status`: a running job's state, per-rank step, heartbeat age,
// host and last error, asked of its controller (Note [Live job status],
// launcher/job_status_board.h).
//
//   dslaunch status                      the one job running here (or a line per job)
//   dslaunch status --job ID --watch     refresh every --interval_ms until the job ends
//   dslaunch status --controller HOST:PORT --token_file FILE --job ID
//                                        a controller on another machine
//
// On the controller's machine the job's status file (Note [Job status
// file], launcher/job_status_file.h) says where to ask and with which token.
#pragma once

#include <string>
#include <vector>

#include "proto/controller.pb.h"

namespace dslaunch {

// `args` without "dslaunch status"; returns the exit code: 0 shown, 1 no
// such job or its controller did not answer, 2 bad flags.
int RunStatusCommand(const std::vector<std::string>& args);

// The table `dslaunch status` prints for one job.
std::string FormatJobStatus(const JobStatusReply& status);

// One line per job: "ID  STATE  step S/T  ranks A/W alive".
std::string FormatJobLine(const JobStatusReply& status);

}  // namespace dslaunch
