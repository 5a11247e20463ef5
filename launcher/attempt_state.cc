#include "launcher/attempt_state.h"

#include <signal.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/control_plane_defaults.h"
#include "common/rank_contract.h"

namespace dslaunch {
namespace {

using Clock = std::chrono::steady_clock;

// Note [Membership]: how long the ranks get to checkpoint before a returning
// host is taken in, when the job sets no preemption grace of its own.
constexpr std::chrono::milliseconds kRescaleCheckpointGrace(kDefaultPreemptGraceMs);

int64_t NowUs() { return absl::ToUnixMicros(absl::Now()); }

bool IsFailure(const RankEnded& ended) {
  return ended.state() != RANK_EXITED || ended.exit_code() != 0;
}

AttemptEnd ClassifyEnd(const RankEnded& ended) {
  switch (ended.state()) {
    case RANK_LOST:
      return ATTEMPT_STARTUP_FAILURE;
    case RANK_KILLED:
      return ATTEMPT_RANK_SIGNALLED;
    default:
      return ATTEMPT_RANK_ERROR;
  }
}

int ExitCodeOf(const RankEnded& ended) {
  switch (ended.state()) {
    case RANK_KILLED:
      return 128 + ended.signal();
    case RANK_LOST:
      return 127;
    default:
      return ended.exit_code();
  }
}

std::vector<std::string> StderrTail(const RankEnded& ended) {
  return {ended.stderr_tail().begin(), ended.stderr_tail().end()};
}

}  // namespace

JobController::AttemptState::AttemptState(JobController& job, int attempt, const AttemptReport* previous)
    : job_(job), spec_(job.spec_), plan_(job.plan_), attempt_(attempt), previous_(previous) {
  report_.attempt = attempt;
}

bool JobController::AttemptState::Start() {
  std::vector<std::string> hosts;
  for (const auto& node : plan_.nodes) hosts.push_back(node.host);
  job_.log_->Append(JobEvent("attempt_start")
                        .Int("attempt", attempt_)
                        .Int("world_size", plan_.world_size())
                        .Text("hosts", absl::StrJoin(hosts, ",")));
  if (job_.output_ != nullptr) {
    absl::Status ready = job_.output_->OnAttemptStarted(attempt_);
    if (!ready.ok()) {
      report_.end = ATTEMPT_STARTUP_FAILURE;
      report_.exit_code = 1;
      report_.cause = std::string(ready.message());
      report_.startup_error = report_.cause;
      if (job_.board_ != nullptr) job_.board_->AttemptFailed(report_.cause);
      report_.failed_unix_us = report_.all_gone_unix_us = NowUs();
      job_.SetState(JOB_STOPPING);
      return false;
    }
  }
  for (const auto& rank : plan_.ranks) live_.insert(rank.global_rank);
  if (job_.board_ != nullptr) job_.board_->StartAttempt(attempt_, plan_);
  std::vector<bool> node_started;
  // Note [Controller failover]: the ranks of a resumed attempt run already;
  // the agents' replay tells how each stands.
  const bool attached = job_.attaching_;
  job_.attaching_ = false;
  absl::Status started;
  if (attached) {
    node_started.assign(plan_.nodes.size(), true);
    job_.log_->Append(JobEvent("attempt_attached").Int("attempt", attempt_));
  } else {
    started = job_.StartAttempt(attempt_, &node_started);
  }
  for (size_t node = 0; node < node_started.size(); ++node) {
    if (node_started[node]) continue;
    for (int rank : plan_.RanksOfNode(static_cast<int>(node))) live_.erase(rank);
  }
  if (!started.ok()) {
    Failure failure(ATTEMPT_STARTUP_FAILURE, absl::StrCat("could not start the ranks: ", started.message()),
                    NowUs());
    failure.startup_error = std::string(started.message());
    Fail(std::move(failure));
  } else {
    report_.started_unix_us = NowUs();
    job_.SetState(JOB_RUNNING);
    if (previous_ != nullptr && !attached) job_.LogRecovery(*previous_, report_);
  }
  last_progress_change_ = next_progress_check_ = Clock::now();
  return true;
}

AttemptReport JobController::AttemptState::Finish() {
  switch (phase_) {
    case Phase::kCheckpointing:
      // (6) Every rank saved its checkpoint and left by itself: a clean
      // preemption, reported as the signal it answers (CANCELLED,
      // 128+signal), or a rescale (RESCALED) that restarts at once.
      Notice("every rank saved its checkpoint and stopped");
      report_.all_gone_unix_us = last_end_us_;
      break;
    case Phase::kRunning:  // (5)
      report_.end = ATTEMPT_SUCCEEDED;
      report_.exit_code = 0;
      report_.all_gone_unix_us = last_end_us_;
      break;
    case Phase::kStopping:  // (4)
      report_.all_gone_unix_us = every_end_reported_ && last_end_us_ > 0 ? last_end_us_ : NowUs();
      if (report_.failed_unix_us > 0 && last_stopped_us_ > 0) {
        report_.teardown_us = std::max<int64_t>(0, last_stopped_us_ - report_.failed_unix_us);
      }
      break;
  }
  return report_;
}

Clock::time_point JobController::AttemptState::WakeAt() {
  // At least once a second, for the deadlines and the freeze notices.
  Clock::time_point wake = phase_ == Phase::kStopping ? teardown_deadline_ : Clock::now() + std::chrono::seconds(1);
  if (phase_ == Phase::kCheckpointing) wake = std::min(wake, checkpoint_deadline_);
  if (phase_ != Phase::kStopping && spec_.hang_timeout.count() > 0) wake = std::min(wake, next_progress_check_);
  return wake;
}

void JobController::AttemptState::OnTick() {
  const auto now = Clock::now();
  if (phase_ == Phase::kCheckpointing && now >= checkpoint_deadline_) {
    OnCheckpointGraceOver();
  } else if (phase_ == Phase::kStopping && now >= teardown_deadline_) {
    OnTeardownDeadline();
  }
}

void JobController::AttemptState::OnCheckpointGraceOver() {
  Notice(absl::StrCat(live_.size(), " rank(s) did not stop within the ", spec_.preempt_grace.count(),
                      " ms checkpoint grace; stopping them"));
  EnterStopping(spec_.stop_grace, report_.cause);
}

void JobController::AttemptState::OnTeardownDeadline() {
  Notice(absl::StrCat("attempt ", attempt_, ": ", live_.size(), " rank(s) did not report their end in time (",
                      absl::StrJoin(live_, ","), "); treating them as lost"));
  every_end_reported_ = false;
  gave_up_waiting_ = true;
}

void JobController::AttemptState::OnStopSignal(int signal_number) {
  // Note [Preemption]: SIGTERM/SIGUSR1 ask the ranks (through the store) to
  // save a checkpoint at their next step boundary and exit; only when they
  // have not within the grace are they stopped.
  const bool can_preempt = spec_.preempt_grace.count() > 0 && spec_.request_checkpoint &&
                           (signal_number == SIGTERM || signal_number == SIGUSR1);
  if (phase_ == Phase::kRunning && can_preempt) {
    job_.RecordSignal(attempt_, signal_number, "checkpoint_and_stop");
    CancelFor(signal_number);
    Notice(absl::StrCat(report_.cause, "; asking every rank to save a checkpoint and stop (",
                        spec_.preempt_grace.count(), " ms grace; again to stop now)"));
    EnterCheckpointing(spec_.preempt_grace);
    return;
  }
  job_.RecordSignal(attempt_, signal_number, phase_ == Phase::kStopping ? "kill" : "stop");
  switch (phase_) {
    case Phase::kCheckpointing:
      Notice("stopping every rank without waiting for their checkpoint");
      EnterStopping(spec_.stop_grace, report_.cause);
      break;
    case Phase::kRunning:
      CancelFor(signal_number);
      Notice(absl::StrCat(report_.cause, "; stopping every rank (again to skip the ", spec_.stop_grace.count(),
                          " ms grace)"));
      EnterStopping(spec_.stop_grace, report_.cause);
      break;
    case Phase::kStopping:
      Notice("stopping every rank now (SIGKILL)");
      EnterStopping(std::chrono::milliseconds(0), "second stop signal");
      break;
  }
}

void JobController::AttemptState::OnHostBack(int node) {
  // Note [Membership]: take it back in at a checkpoint boundary; otherwise a
  // restart's replan takes it back if it still answers.
  const bool planned_out = std::find(job_.active_.begin(), job_.active_.end(), node) == job_.active_.end();
  if (!job_.lost_agents_.count(node) || !planned_out || job_.Blacklisted(node) || phase_ != Phase::kRunning ||
      !spec_.request_checkpoint || spec_.min_nodes <= 0) {
    return;
  }
  const std::string& host = job_.agents_[node]->host();
  job_.log_->Append(JobEvent("host_back").Int("attempt", attempt_).Text("host", host));
  report_.end = ATTEMPT_RESCALED;
  report_.exit_code = 0;
  report_.cause = absl::StrCat("host ", host, " is back");
  report_.failed_unix_us = NowUs();
  Notice(absl::StrCat("host ", host, " is back; asking every rank to save a checkpoint and stop, to restart with it"));
  EnterCheckpointing(spec_.preempt_grace.count() > 0 ? spec_.preempt_grace : kRescaleCheckpointGrace);
}

void JobController::AttemptState::OnAgentLost(int node, const absl::Status& why) {
  job_.MarkLost(node);
  const auto in_plan = std::find(job_.active_.begin(), job_.active_.end(), node);
  if (in_plan == job_.active_.end()) return;  // dropped from the plan already
  const std::string& host = job_.agents_[node]->host();
  const std::vector<int> node_ranks = plan_.RanksOfNode(static_cast<int>(in_plan - job_.active_.begin()));
  const std::optional<FreezeWatch::Freeze> freeze = job_.RecentFreeze(/*for_lost_stream=*/true);
  job_.log_->Append(JobEvent("host_lost")
                        .Int("attempt", attempt_)
                        .Text("host", host)
                        .Text("error", why.message())
                        .Int("controller_frozen_ms", freeze ? freeze->duration().count() : 0));
  // Note [Honest exits]: a stream that broke while dslaunch was frozen says
  // nothing against the host.
  if (auto frozen = AttributeLostStream(host, why, freeze, job_.lease_timing())) {
    Fail(Failure(frozen->end, frozen->cause, NowUs()));
    // The host is fine: watch it again, and stop its ranks too rather than
    // leave them to its lease.
    if (job_.WatchAgent(node).ok()) {
      job_.lost_agents_.erase(node);
      job_.lost_flags_[node] = false;
      job_.BeginStop(attempt_, spec_.stop_grace, frozen->cause, node);
    }
  } else {
    Failure failure(ATTEMPT_HOST_LOST, absl::StrCat("lost host ", host, " (", why.message(), ")"), NowUs());
    failure.blamed_agent = node;
    Fail(std::move(failure));
  }
  for (int rank : node_ranks) {
    if (live_.erase(rank) > 0) every_end_reported_ = false;
  }
}

void JobController::AttemptState::OnRankEvent(int node, const RankEvent& event) {
  if (event.attempt() != attempt_) return;  // late news of an earlier attempt
  const int rank = event.global_rank();
  const std::string& host = HostOfRank(rank);
  if (event.has_output()) {
    OnRankOutput(rank, host, event.output());
  } else if (event.has_started()) {
    job_.log_->Append(JobEvent("rank_started").Int("attempt", attempt_).Int("rank", rank).Int("pid", event.started().pid()));
    if (job_.board_ != nullptr) job_.board_->RankStarted(attempt_, rank, event.started().pid());
  } else if (event.has_progress() && event.progress().missed_heartbeat_ms() > 0) {
    OnMissedHeartbeat(rank, host, event.progress());
  } else if (event.has_progress()) {
    OnHeartbeat(rank, event.progress());
  } else if (event.has_ended()) {
    OnRankEnded(rank, host, event.ended());
  }
}

void JobController::AttemptState::OnRankOutput(int rank, const std::string& host, const RankOutput& output) {
  if (job_.output_ != nullptr) job_.output_->OnLine(attempt_, rank, host, output.is_stderr(), output.line());
}

void JobController::AttemptState::OnHeartbeat(int rank, const RankProgress& progress) {
  heartbeats_[rank] = progress;
  if (job_.board_ != nullptr) job_.board_->Heartbeat(attempt_, rank, progress);
  // Recovery timing: the first step any rank finishes after a restart.
  if (previous_ == nullptr || first_step_logged_ || progress.step() < 0 || previous_->failed_unix_us <= 0) return;
  first_step_logged_ = true;
  const int64_t after_us = NowUs() - previous_->failed_unix_us;
  job_.log_->Append(JobEvent("first_step")
                        .Int("attempt", attempt_)
                        .Int("step", progress.step())
                        .Int("failure_to_first_step_us", after_us));
  Notice(absl::StrCat("recovery: attempt ", attempt_, " finished step ", progress.step(), " ", after_us / 1000.0,
                      " ms after the failure"));
}

void JobController::AttemptState::OnMissedHeartbeat(int rank, const std::string& host,
                                                    const RankProgress& progress) {
  job_.log_->Append(JobEvent("heartbeat_missed")
                        .Int("attempt", attempt_)
                        .Int("rank", rank)
                        .Text("host", host)
                        .Int("quiet_ms", progress.missed_heartbeat_ms()));
  FailAsHang(absl::StrCat("rank ", rank, " on ", host, " sent no heartbeat for ", progress.missed_heartbeat_ms(),
                          " ms while its process lives (frozen or stopped)"));
}

void JobController::AttemptState::OnRankEnded(int rank, const std::string& host, const RankEnded& ended) {
  live_.erase(rank);
  last_end_us_ = std::max(last_end_us_, ended.ended_unix_us());
  if (job_.board_ != nullptr) job_.board_->RankFinished(attempt_, rank, ended);
  if (ended.stopped_by_agent() && phase_ == Phase::kStopping) {
    ++report_.stopped_ranks;  // this controller's own teardown
    last_stopped_us_ = std::max(last_stopped_us_, ended.ended_unix_us());
  } else if (ended.stopped_by_agent()) {
    // Note [Honest exits]: stopped, but not by us: the attempt fails,
    // naming who stopped the rank and why.
    const StopAttribution why =
        AttributeUnexpectedStop(rank, host, ended, job_.RecentFreeze(), job_.lease_timing());
    job_.LogRankFailure(attempt_, rank, host, ended, why.cause);
    Failure failure(why.end, why.cause, ended.ended_unix_us());
    failure.stderr_tail = StderrTail(ended);
    failure.blamed_agent = why.blame_host ? AgentOfRank(rank) : -1;
    Fail(std::move(failure));
  } else if (IsFailure(ended)) {
    Failure failure(ClassifyEnd(ended), DescribeEnd(rank, host, ended), ended.ended_unix_us());
    failure.blamed_agent = AgentOfRank(rank);
    // Note [Honest exits]: a rank that failed while this controller was
    // frozen past the leases failed because its peers were being stopped.
    if (auto frozen = AttributeFailureDuringFreeze(failure.cause, job_.RecentFreeze(), job_.lease_timing())) {
      failure.end = frozen->end;
      failure.cause = frozen->cause;
      failure.blamed_agent = -1;
    }
    job_.LogRankFailure(attempt_, rank, host, ended, failure.cause);
    failure.exit_code = ExitCodeOf(ended);
    if (ended.state() == RANK_LOST) failure.startup_error = ended.detail();
    failure.stderr_tail = StderrTail(ended);
    Fail(std::move(failure));
  }
}

void JobController::AttemptState::Fail(Failure failure) {
  if (phase_ == Phase::kStopping) return;
  report_.blamed_agent = failure.blamed_agent;
  report_.end = failure.end;
  report_.exit_code = failure.exit_code;
  report_.cause = std::move(failure.cause);
  report_.startup_error = std::move(failure.startup_error);
  report_.stderr_tail = std::move(failure.stderr_tail);
  report_.failed_unix_us = failure.at_us;
  if (job_.board_ != nullptr) job_.board_->AttemptFailed(report_.cause);
  Notice(absl::StrCat("attempt ", attempt_, ": ", report_.cause, "; stopping every rank"));
  EnterStopping(spec_.stop_grace, report_.cause);
}

void JobController::AttemptState::EnterCheckpointing(std::chrono::milliseconds grace) {
  phase_ = Phase::kCheckpointing;
  checkpoint_deadline_ = Clock::now() + grace;
  job_.SetState(JOB_STOPPING);  // the job is stopping; its ranks checkpoint first
  spec_.request_checkpoint(attempt_);
}

void JobController::AttemptState::EnterStopping(std::chrono::milliseconds grace, const std::string& reason) {
  if (job_.state_ != JOB_STOPPING) job_.SetState(JOB_STOPPING);  // a checkpoint may be under way
  phase_ = Phase::kStopping;
  teardown_deadline_ = Clock::now() + grace + spec_.teardown_margin;
  job_.BeginStop(attempt_, grace, reason);
}

void JobController::AttemptState::CancelFor(int signal_number) {
  report_.end = ATTEMPT_CANCELLED;
  report_.exit_code = 128 + signal_number;
  report_.cause = absl::StrCat("dslaunch received SIG", sigabbrev_np(signal_number));
  report_.failed_unix_us = NowUs();
}

void JobController::AttemptState::CheckProgress() {
  if (spec_.hang_timeout.count() <= 0 || phase_ == Phase::kStopping) return;
  const auto now = Clock::now();
  if (now < next_progress_check_) return;
  next_progress_check_ =
      now + std::min<std::chrono::milliseconds>(std::chrono::milliseconds(500), spec_.hang_timeout / 4);
  // Note [Honest exits]: time dslaunch itself spent frozen is no time the
  // ranks went without progress (it just could not look).
  if (auto freeze = job_.freeze_watch_->LongestSince(last_progress_change_)) {
    last_progress_change_ = std::max(last_progress_change_, freeze->end);
  }
  std::optional<std::string> progress = ProgressMarker();
  if (progress != last_progress_) {
    last_progress_ = progress;
    last_progress_change_ = now;
    return;
  }
  if (!last_progress_ && !unarmed_noted_ && now - last_progress_change_ >= spec_.hang_timeout) {
    // Said once, so that a program that reports no progress is not believed
    // to be watched.
    unarmed_noted_ = true;
    Notice(absl::StrCat("attempt ", attempt_, ": no rank has reported a training step in the ",
                        spec_.hang_timeout.count(),
                        " ms of --hang_timeout_ms: hang detection is armed by the first report and is not armed "
                        "yet (dsrank and the C++ runtime report every step; another program reports through "
                        "heartbeats or the store key ",
                        store_keys::kProgressStep, ")"));
  }
  if (!last_progress_ || now - last_progress_change_ < spec_.hang_timeout) return;
  const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress_change_);
  FailAsHang(absl::StrCat("no training progress for ", idle.count(), " ms while every rank is alive (last: ",
                          *last_progress_, ")"));
}

std::optional<std::string> JobController::AttemptState::ProgressMarker() const {
  // With heartbeats it is every rank's step (Note [Rank heartbeats]);
  // otherwise what the ranks publish in the store (dsrank: rank 0's step).
  if (heartbeats_.empty()) return spec_.read_progress ? spec_.read_progress(attempt_) : std::nullopt;
  const bool no_step_yet =
      std::all_of(heartbeats_.begin(), heartbeats_.end(), [](const auto& beat) { return beat.second.step() < 0; });
  if (no_step_yet) return std::nullopt;  // still starting
  std::vector<std::string> steps;
  for (const auto& [rank, beat] : heartbeats_) steps.push_back(absl::StrCat(beat.step()));
  return absl::StrCat("steps ", absl::StrJoin(steps, ","));
}

void JobController::AttemptState::FailAsHang(std::string cause) {
  if (phase_ == Phase::kStopping) return;
  absl::StrAppend(&cause, job_.DiagnoseHang(attempt_, heartbeats_));
  Fail(Failure(ATTEMPT_HANG, std::move(cause), NowUs()));
}

int JobController::AttemptState::AgentOfRank(int rank) const {
  return job_.active_[plan_.ranks[rank].node_index];
}

const std::string& JobController::AttemptState::HostOfRank(int rank) const {
  return plan_.nodes[plan_.ranks[rank].node_index].host;
}

}  // namespace dslaunch
