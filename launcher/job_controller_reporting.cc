// JobController: what it reports. The event log's lines for rank failures,
// attempts and recoveries, the fail-fast figure, Note [Honest exits]'s
// freeze notices, and the job's summary with its root cause.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "launcher/job_controller.h"

namespace dslaunch {
namespace {

constexpr size_t kCauseStderrLines = 3;

std::string AttemptEndName(AttemptEnd end) {
  switch (end) {
    case ATTEMPT_SUCCEEDED:
      return "succeeded";
    case ATTEMPT_STARTUP_FAILURE:
      return "startup failure";
    case ATTEMPT_RANK_ERROR:
      return "rank error";
    case ATTEMPT_RANK_SIGNALLED:
      return "rank killed by a signal";
    case ATTEMPT_HOST_LOST:
      return "host lost";
    case ATTEMPT_HANG:
      return "hang";
    case ATTEMPT_RESCALED:
      return "rescaled";
    case ATTEMPT_RANK_STOPPED:
      return "rank stopped by its agent";
    case ATTEMPT_CONTROLLER_FROZEN:
      return "controller frozen";
    case ATTEMPT_CANCELLED:
      return "cancelled";
    default:
      return "unknown";
  }
}

}  // namespace

void JobController::LogJobStart() {
  log_->Append(JobEvent("job_start")
                   .Text("job_id", spec_.job_id)
                   .Int("world_size", plan_.world_size())
                   .Int("nodes", static_cast<int64_t>(plan_.nodes.size()))
                   .Int("max_restarts", spec_.max_restarts)
                   .Int("restart_backoff_ms", spec_.restart_backoff.count())
                   .Int("max_restart_backoff_ms", spec_.max_restart_backoff.count()));
  log_->Append(JobEvent("state").Text("state", JobState_Name(state_)).Int("attempt", attempt_));
}

void JobController::LogJobEnd(const JobOutcome& outcome) {
  log_->Append(JobEvent("job_end")
                   .Text("state", JobState_Name(outcome.state))
                   .Int("exit_code", outcome.exit_code)
                   .Int("attempts", static_cast<int64_t>(outcome.attempts.size())));
}

void JobController::LogRankFailure(int attempt, int rank, const std::string& host,
                                   const RankEnded& ended, const std::string& cause) {
  const int from = std::max(0, ended.stderr_tail_size() - static_cast<int>(kCauseStderrLines));
  std::vector<std::string> tail(ended.stderr_tail().begin() + from, ended.stderr_tail().end());
  log_->Append(JobEvent("rank_failed")
                   .Int("attempt", attempt)
                   .Int("rank", rank)
                   .Text("host", host)
                   .Text("state", RankState_Name(ended.state()))
                   .Int("exit_code", ended.exit_code())
                   .Int("signal", ended.signal())
                   .Int("ended_us", ended.ended_unix_us())
                   .Text("cause", cause)
                   .Text("detail", ended.detail())
                   .Text("stderr_tail", absl::StrJoin(tail, "\n")));
  if (ended.stopped_by_agent()) {
    // Note [Honest exits]: who stopped it, as the agent reported.
    log_->Append(JobEvent("rank_stopped")
                     .Int("attempt", attempt)
                     .Int("rank", rank)
                     .Text("host", host)
                     .Text("stop_reason", StopReason_Name(ended.stop_reason()))
                     .Text("stop_detail", ended.stop_detail())
                     .Int("controller_silent_ms", ended.controller_silent_ms()));
  }
}

void JobController::NoteFreezes(int attempt) {
  for (const FreezeWatch::Freeze& freeze : freeze_watch_->TakeNew()) {
    const bool expired = freeze.duration() >= spec_.lease;
    log_->Append(JobEvent("controller_frozen")
                     .Int("attempt", attempt)
                     .Int("frozen_ms", freeze.duration().count())
                     .Int("lease_ms", spec_.lease.count())
                     .Bool("leases_expired", expired));
    notice_(absl::StrCat(DescribeFreeze(freeze), " and runs again; ",
                         expired ? absl::StrCat("the agents' leases (", spec_.lease.count(),
                                                " ms) expired meanwhile and they stop its ranks")
                                 : absl::StrCat("the agents' lease is ", spec_.lease.count(), " ms")));
  }
}

std::optional<FreezeWatch::Freeze> JobController::RecentFreeze(bool for_lost_stream) {
  // A freeze explains what the agents report now if their news could not
  // have come sooner. A rank's end: the lease runs out, the rank takes up to
  // the grace to stop, and its end reaches the controller once it runs
  // again. A broken stream is seen within moments of running again (gRPC's
  // keep-alive runs every lease/4): a freeze longer ago is not its cause.
  const auto window = for_lost_stream ? std::max<std::chrono::milliseconds>(spec_.lease, std::chrono::seconds(2))
                                      : spec_.lease + spec_.stop_grace + spec_.teardown_margin;
  return freeze_watch_->LongestSince(std::chrono::steady_clock::now() - window);
}

void JobController::LogAttemptEnd(const AttemptReport& report) {
  JobEvent event("attempt_end");
  event.Int("attempt", report.attempt)
      .Text("end", AttemptEnd_Name(report.end))
      .Text("class", AttemptEndName(report.end))
      .Int("exit_code", report.exit_code)
      .Text("cause", report.cause);
  if (!report.startup_error.empty()) event.Text("startup_error", report.startup_error);
  event.Int("stopped_ranks", report.stopped_ranks)
      .Int("teardown_us", report.teardown_us)
      .Int("started_us", report.started_unix_us)
      .Int("failed_us", report.failed_unix_us)
      .Int("all_gone_us", report.all_gone_unix_us);
  log_->Append(event);
}

void JobController::LogRecovery(const AttemptReport& failed, const AttemptReport& restarted) {
  // Note: failed_us comes from the failing rank's agent, the other two from
  // the controller; across hosts the figures include their clock offset.
  JobEvent event("recovery");
  event.Int("attempt", restarted.attempt)
      .Int("failed_attempt", failed.attempt)
      .Text("failed_class", AttemptEndName(failed.end))
      .Int("failed_us", failed.failed_unix_us)
      .Int("all_gone_us", failed.all_gone_unix_us)
      .Int("restarted_us", restarted.started_unix_us);
  if (failed.failed_unix_us > 0) {
    const int64_t stop_us = failed.all_gone_unix_us - failed.failed_unix_us;
    const int64_t restart_us = restarted.started_unix_us - failed.all_gone_unix_us;
    const int64_t total_us = restarted.started_unix_us - failed.failed_unix_us;
    event.Int("failure_to_gone_us", stop_us)
        .Int("gone_to_restart_us", restart_us)
        .Int("failure_to_restart_us", total_us);
    notice_(absl::StrCat("recovery: attempt ", restarted.attempt, " started ", total_us / 1000.0,
                         " ms after the failure (every rank gone after ", stop_us / 1000.0,
                         " ms, then ", restart_us / 1000.0, " ms backoff and start)"));
  }
  log_->Append(event);
}

void JobController::ReportAttempt(const AttemptReport& report) {
  if (report.end == ATTEMPT_CANCELLED) return;
  if (report.teardown_us >= 0) {
    notice_(absl::StrCat("fail-fast: ", report.stopped_ranks, " other rank(s) stopped ",
                         report.teardown_us / 1000.0, " ms after the failure"));
  }
}

void JobController::Summarize(const JobOutcome& outcome) {
  if (outcome.state == JOB_SUCCEEDED && outcome.attempts.size() == 1) return;
  std::vector<std::string> parts;
  for (const auto& attempt : outcome.attempts) {
    std::string part = absl::StrCat("attempt ", attempt.attempt, ": ", AttemptEndName(attempt.end));
    if (!attempt.cause.empty()) absl::StrAppend(&part, " (", attempt.cause, ")");
    parts.push_back(part);
  }
  if (!outcome.stop_note.empty()) parts.push_back(outcome.stop_note);
  std::string state = outcome.state == JOB_SUCCEEDED ? "succeeded"
                      : outcome.state == JOB_CANCELLED ? "was cancelled"
                                                       : "failed";
  notice_(absl::StrCat("job ", spec_.job_id, " ", state, " after ", outcome.attempts.size(),
                       " attempt(s): ", absl::StrJoin(parts, "; ")));
  const AttemptReport& last = outcome.attempts.back();
  if (outcome.state == JOB_FAILED) {
    std::string cause = absl::StrCat("root cause: ", last.cause);
    if (!last.stderr_tail.empty()) {
      size_t from = last.stderr_tail.size() > kCauseStderrLines
                        ? last.stderr_tail.size() - kCauseStderrLines
                        : 0;
      std::vector<std::string> tail(last.stderr_tail.begin() + from, last.stderr_tail.end());
      absl::StrAppend(&cause, "; last stderr: ", absl::StrJoin(tail, " | "));
    }
    notice_(cause);
  }
}

}  // namespace dslaunch
