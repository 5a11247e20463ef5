// Whether a failed job is started again, and after how long. Pure logic over
// the attempts so far: no clock, no I/O. Thread-compatible (const after
// construction).
//
// Note [Restart policy]
//  - Budget: --max_restarts is one job-wide budget (attempts 0..max_restarts).
//  - Backoff: the wait before attempt k (k >= 1) is
//    min(restart_backoff * 2^(k-1), max_restart_backoff), so a flapping job
//    does not hammer a shared file system or scheduler.
//  - Early stop: two consecutive startup failures with the same startup_error
//    (a missing program, a wrong token) will not fix themselves; the rest of
//    the budget is not burnt on them.
//  - A cancelled job (SIGINT/SIGTERM to dslaunch) is never restarted.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "launcher/attempt_report.h"

namespace dslaunch {

struct RestartDecision {
  bool restart = false;
  std::chrono::milliseconds backoff{0};  // when restart: wait this long first
  std::string reason;                    // when not: one line, "the job was cancelled"
  bool early_stop = false;               // not restarting although budget is left
};

class RestartPolicy {
 public:
  RestartPolicy(int max_restarts, std::chrono::milliseconds initial_backoff,
                std::chrono::milliseconds max_backoff);

  // `history` holds every attempt so far, oldest first; the last one has just
  // ended and did not succeed. REQUIRES: !history.empty().
  RestartDecision Decide(const std::vector<AttemptReport>& history) const;

  // The wait before attempt `attempt` (>= 1); saturates at the cap.
  std::chrono::milliseconds BackoffBefore(int attempt) const;

 private:
  const int max_restarts_;
  const std::chrono::milliseconds initial_backoff_;
  const std::chrono::milliseconds max_backoff_;
};

}  // namespace dslaunch
