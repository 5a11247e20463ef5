// How one attempt of a job ended: written by JobController, read by the
// RestartPolicy, the job summary and the event log.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "proto/job.pb.h"

namespace dslaunch {

struct AttemptReport {
  int attempt = 0;
  AttemptEnd end = ATTEMPT_END_UNSPECIFIED;
  int exit_code = 0;          // what dslaunch exits with if this is the last attempt
  std::string cause;          // one line: rank, host, code or signal
  // For ATTEMPT_STARTUP_FAILURE: what went wrong without naming the rank or
  // host ("program 'x' not found in PATH"), so that the same problem seen
  // first on another rank next time still compares equal (RestartPolicy).
  std::string startup_error;
  std::vector<std::string> stderr_tail;  // of the failing rank
  // The agent (index into the controller's agents) whose host the failure is
  // blamed on: the failing rank's or the lost one; -1 for none (blacklist).
  int blamed_agent = -1;
  // Fail-fast figure: from the failing rank's end to the last stopped rank's
  // end (agents' clocks); -1 when nothing had to be stopped.
  int64_t teardown_us = -1;
  int stopped_ranks = 0;

  // Recovery timing (Unix microseconds; 0 when it did not happen).
  // The failure: the failing rank's ended_unix_us (agent's clock), or the
  // controller's clock for a lost host or a refused start.
  int64_t failed_unix_us = 0;
  // Every rank gone: the latest ended_unix_us of the attempt's ranks, or the
  // controller's clock when some rank never reported (lost host, timeout).
  int64_t all_gone_unix_us = 0;
  // The attempt's ranks were started (controller's clock, StartRanks answered).
  int64_t started_unix_us = 0;
};

}  // namespace dslaunch
