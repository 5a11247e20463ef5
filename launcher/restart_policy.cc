#include "launcher/restart_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dslaunch {

RestartPolicy::RestartPolicy(int max_restarts, std::chrono::milliseconds initial_backoff,
                             std::chrono::milliseconds max_backoff)
    : max_restarts_(max_restarts),
      initial_backoff_(std::max(initial_backoff, std::chrono::milliseconds(0))),
      max_backoff_(std::max(max_backoff, std::chrono::milliseconds(0))) {}

std::chrono::milliseconds RestartPolicy::BackoffBefore(int attempt) const {
  if (attempt < 1 || initial_backoff_.count() == 0) return std::chrono::milliseconds(0);
  // Double step by step so that a large attempt number cannot overflow.
  std::chrono::milliseconds wait = initial_backoff_;
  for (int k = 1; k < attempt && wait < max_backoff_; ++k) wait *= 2;
  return std::min(wait, max_backoff_);
}

RestartDecision RestartPolicy::Decide(const std::vector<AttemptReport>& history) const {
  RestartDecision decision;
  if (history.empty()) {
    decision.reason = "no attempt has run";
    return decision;
  }
  const AttemptReport& last = history.back();
  if (last.end == ATTEMPT_SUCCEEDED) {
    decision.reason = "the job succeeded";
    return decision;
  }
  if (last.end == ATTEMPT_CANCELLED) {
    decision.reason = "the job was cancelled";
    return decision;
  }
  // A rescale (a returning host taken back in at a checkpoint) is no failure:
  // it restarts at once and costs nothing from the budget.
  if (last.end == ATTEMPT_RESCALED) {
    decision.restart = true;
    decision.reason = "a host came back";
    return decision;
  }
  int restarts_used = 0;
  for (size_t i = 0; i + 1 < history.size(); ++i) restarts_used += history[i].end == ATTEMPT_RESCALED ? 0 : 1;
  if (restarts_used >= max_restarts_) {
    decision.reason = max_restarts_ == 0
                          ? "--max_restarts is 0"
                          : absl::StrCat("all ", max_restarts_, " restart(s) used");
    return decision;
  }
  if (history.size() >= 2) {
    const AttemptReport& before = history[history.size() - 2];
    auto key = [](const AttemptReport& report) {
      return report.startup_error.empty() ? report.cause : report.startup_error;
    };
    if (last.end == ATTEMPT_STARTUP_FAILURE && before.end == ATTEMPT_STARTUP_FAILURE &&
        key(last) == key(before)) {
      decision.early_stop = true;
      decision.reason = absl::StrCat("attempt ", last.attempt, " failed to start the same way as attempt ",
                                     before.attempt, " (", key(last), ")");
      return decision;
    }
  }
  decision.restart = true;
  decision.backoff = BackoffBefore(restarts_used + 1);
  return decision;
}

}  // namespace dslaunch
