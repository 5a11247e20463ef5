#include "launcher/job_controller.h"

#include <signal.h>

#include <algorithm>
#include <future>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "launcher/start_ranks_request.h"

namespace dslaunch {
namespace {

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

}  // namespace

JobController::JobController(JobSpec spec, std::vector<AgentClient*> agents,
                             RankOutputSink* output, std::function<void(const std::string&)> notice,
                             std::function<void(int)> on_attempt_over, JobEventLog* event_log)
    : spec_(std::move(spec)),
      agents_(std::move(agents)),
      output_(output),
      notice_(std::move(notice)),
      on_attempt_over_(std::move(on_attempt_over)),
      log_(event_log != nullptr ? event_log : &null_log_),
      policy_(spec_.max_restarts, spec_.restart_backoff, spec_.max_restart_backoff),
      freeze_watch_(spec_.freeze_watch != nullptr
                        ? spec_.freeze_watch
                        : std::make_shared<FreezeWatch>(std::chrono::milliseconds(100),
                                                        std::max<std::chrono::milliseconds>(
                                                            std::chrono::milliseconds(500),
                                                            2 * spec_.keepalive_interval))),
      plan_(spec_.plan) {
  for (size_t i = 0; i < agents_.size(); ++i) active_.push_back(static_cast<int>(i));
  lost_flags_ = std::make_unique<std::atomic<bool>[]>(agents_.size());
  back_reported_ = std::make_unique<std::atomic<bool>[]>(agents_.size());
  for (size_t i = 0; i < agents_.size(); ++i) {
    lost_flags_[i] = false;
    back_reported_[i] = false;
  }
}

std::string JobController::DescribeEnd(int rank, const std::string& host, const RankEnded& ended) {
  std::string who = absl::StrCat("rank ", rank, " on ", host);
  switch (ended.state()) {
    case RANK_KILLED:
      return absl::StrCat(who, " was killed by signal ", ended.signal(), " (SIG",
                          sigabbrev_np(ended.signal()) ? sigabbrev_np(ended.signal()) : "?", ")");
    case RANK_LOST:
      return absl::StrCat(who, " could not be started: ", ended.detail());
    default:
      return absl::StrCat(who, " exited with code ", ended.exit_code());
  }
}

void JobController::SetState(JobState next) {
  bool allowed = false;
  switch (state_) {
    case JOB_PLANNING:
      allowed = next == JOB_STARTING || next == JOB_FAILED;  // (1), (0)
      break;
    case JOB_STARTING:
      allowed = next == JOB_RUNNING || next == JOB_STOPPING;  // (2), (4)
      break;
    case JOB_RUNNING:
      allowed = next == JOB_STOPPING || next == JOB_SUCCEEDED;  // (3), (7)
      break;
    case JOB_STOPPING:
      allowed = next == JOB_RESTARTING || next == JOB_FAILED || next == JOB_CANCELLED;  // (5), (8)
      break;
    case JOB_RESTARTING:
      allowed = next == JOB_STARTING || next == JOB_CANCELLED;  // (6), (9)
      break;
    default:
      allowed = false;
  }
  if (!allowed) {
    // A bug, not an input problem: say so loudly and keep the old state.
    notice_(absl::StrCat("internal error: job state ", JobState_Name(state_), " cannot become ",
                         JobState_Name(next)));
    return;
  }
  state_ = next;
  log_->Append(JobEvent("state").Text("state", JobState_Name(next)).Int("attempt", attempt_));
}

void JobController::OnSignal(int signal_number) {
  Event event;
  event.kind = Event::kSignal;
  event.signal_number = signal_number;
  events_.Push(std::move(event));
}

void JobController::KeepAliveLoop(int index) {
  AgentClient* agent = agents_[index];
  auto last_probe = std::chrono::steady_clock::time_point();
  std::unique_lock<std::mutex> lock(keepalive_mu_);
  while (keepalive_running_) {
    lock.unlock();
    const bool lost = lost_flags_[index].load();
    const auto now = std::chrono::steady_clock::now();
    if (!lost) {
      (void)agent->KeepAlive(spec_.job_id);  // a lost agent shows up as a broken stream
    } else if (spec_.rejoin_check.count() > 0 && now - last_probe >= spec_.rejoin_check) {
      // Note [Membership]: is the lost host's agent back?
      last_probe = now;
      if (agent->KeepAlive(spec_.job_id).ok() && !back_reported_[index].exchange(true)) {
        Event back;
        back.kind = Event::kHostBack;
        back.node = index;
        events_.Push(std::move(back));
      }
    }
    lock.lock();
    keepalive_cv_.wait_for(lock, spec_.keepalive_interval, [&] { return !keepalive_running_; });
  }
}

JobOutcome JobController::Run() {
  JobOutcome outcome;
  log_->Append(JobEvent("job_start")
                   .Text("job_id", spec_.job_id)
                   .Int("world_size", plan_.world_size())
                   .Int("nodes", static_cast<int64_t>(plan_.nodes.size()))
                   .Int("max_restarts", spec_.max_restarts)
                   .Int("restart_backoff_ms", spec_.restart_backoff.count())
                   .Int("max_restart_backoff_ms", spec_.max_restart_backoff.count()));
  log_->Append(JobEvent("state").Text("state", JobState_Name(state_)).Int("attempt", attempt_));
  auto log_job_end = [&] {
    log_->Append(JobEvent("job_end")
                     .Text("state", JobState_Name(outcome.state))
                     .Int("exit_code", outcome.exit_code)
                     .Int("attempts", static_cast<int64_t>(outcome.attempts.size())));
  };
  for (size_t node = 0; node < agents_.size(); ++node) {
    absl::Status watching = WatchAgent(static_cast<int>(node));
    if (!watching.ok()) {
      notice_(absl::StrCat("cannot watch the job on ", agents_[node]->host(), ": ",
                           watching.message()));
      for (size_t opened = 0; opened < node; ++opened) agents_[opened]->StopWatch();
      SetState(JOB_FAILED);
      outcome.state = JOB_FAILED;
      outcome.exit_code = 1;
      log_job_end();
      return outcome;
    }
  }
  keepalive_running_ = true;
  std::vector<std::thread> keepalive_threads;
  for (size_t index = 0; index < agents_.size(); ++index) {
    keepalive_threads.emplace_back([this, index] { KeepAliveLoop(static_cast<int>(index)); });
  }

  for (int attempt = 0;; ++attempt) {
    attempt_ = attempt;
    SetState(JOB_STARTING);
    AttemptReport report =
        RunAttempt(attempt, outcome.attempts.empty() ? nullptr : &outcome.attempts.back());
    outcome.attempts.push_back(report);
    LogAttemptEnd(report);
    if (on_attempt_over_) on_attempt_over_(attempt);
    outcome.exit_code = report.exit_code;
    if (report.end == ATTEMPT_SUCCEEDED) {
      SetState(JOB_SUCCEEDED);
      break;
    }
    ReportAttempt(report);
    BlameHost(report);
    const RestartDecision decision = DecideRestart(&outcome);
    if (!decision.restart || !ReplanMembership(attempt + 1)) {
      SetState(first_signal_ != 0 ? JOB_CANCELLED : JOB_FAILED);
      break;
    }
    SetState(JOB_RESTARTING);
    std::string when = decision.backoff.count() > 0
                           ? absl::StrCat(" in ", decision.backoff.count(), " ms")
                           : std::string();
    if (report.end == ATTEMPT_RESCALED) {
      notice_(absl::StrCat("restarting the job: attempt ", attempt + 1, " (a host came back; no restart used)"));
    } else {
      int used = 0;
      for (const auto& earlier : outcome.attempts) used += earlier.end == ATTEMPT_RESCALED ? 0 : 1;
      notice_(absl::StrCat("restarting the job: attempt ", attempt + 1, " (restart ", used, " of ",
                           spec_.max_restarts, ")", when));
    }
    if (!WaitBeforeRestart(attempt + 1, decision.backoff)) {
      outcome.exit_code = 128 + first_signal_;
      outcome.stop_note = absl::StrCat("SIG", sigabbrev_np(first_signal_),
                                       " while waiting to start attempt ", attempt + 1);
      SetState(JOB_CANCELLED);
      break;
    }
  }
  outcome.state = state_;
  // Note [Honest exits]: only a job that succeeded exits 0 (a rescale whose
  // restart finds too few hosts ends FAILED with its attempt's 0).
  if (outcome.state != JOB_SUCCEEDED && outcome.exit_code == 0) outcome.exit_code = 1;

  {
    std::lock_guard<std::mutex> lock(keepalive_mu_);
    keepalive_running_ = false;
  }
  keepalive_cv_.notify_all();
  for (auto& thread : keepalive_threads) thread.join();
  for (AgentClient* agent : agents_) agent->StopWatch();
  Summarize(outcome);
  log_job_end();
  return outcome;
}

RestartDecision JobController::DecideRestart(JobOutcome* outcome) {
  const AttemptReport& report = outcome->attempts.back();
  RestartDecision decision = policy_.Decide(outcome->attempts);
  // A stop signal during the teardown of a failed attempt also means: no more attempts.
  const bool signalled = first_signal_ != 0;
  if (signalled && decision.restart) {
    decision = RestartDecision();
    decision.reason = absl::StrCat("dslaunch received SIG", sigabbrev_np(first_signal_));
  }
  JobEvent logged("restart_decision");
  logged.Int("attempt", report.attempt).Bool("restart", decision.restart);
  if (decision.restart) {
    logged.Int("next_attempt", report.attempt + 1).Int("backoff_ms", decision.backoff.count());
  } else {
    logged.Text("reason", decision.reason).Bool("early_stop", decision.early_stop);
  }
  log_->Append(logged);
  if (decision.restart) return decision;

  // A job without restarts needs no "not restarting" line; a cancelled one
  // has said why it stops already.
  if (decision.early_stop || (spec_.max_restarts > 0 && !signalled)) {
    notice_(absl::StrCat("not restarting: ", decision.reason));
  }
  if (decision.early_stop) outcome->stop_note = absl::StrCat("not restarting: ", decision.reason);
  if (signalled) {
    outcome->exit_code = 128 + first_signal_;
    if (report.end != ATTEMPT_CANCELLED) {
      outcome->stop_note = absl::StrCat("SIG", sigabbrev_np(first_signal_),
                                        " during the teardown of attempt ", report.attempt);
    }
  }
  return decision;
}

void JobController::RecordSignal(int attempt, int signal_number, const std::string& action) {
  ++signals_seen_;
  if (first_signal_ == 0) first_signal_ = signal_number;
  log_->Append(JobEvent("signal")
                   .Int("attempt", attempt)
                   .Int("signal", signal_number)
                   .Text("name", absl::StrCat("SIG", sigabbrev_np(signal_number)))
                   .Text("action", action));
}

bool JobController::WaitBeforeRestart(int next_attempt, std::chrono::milliseconds backoff) {
  const auto deadline = std::chrono::steady_clock::now() + backoff;
  std::vector<Event> for_next_attempt;
  bool cancelled = false;
  // Even with no backoff, what is queued already is looked at: a signal that
  // arrived after the attempt's last rank ended cancels the restart.
  while (std::optional<Event> event = events_.PopUntil(deadline)) {
    if (event->kind == Event::kSignal) {
      RecordSignal(next_attempt - 1, event->signal_number, "cancel_restart");
      notice_(absl::StrCat("dslaunch received SIG", sigabbrev_np(event->signal_number),
                           " while waiting to restart; not starting attempt ", next_attempt));
      cancelled = true;
      break;
    }
    if (event->kind == Event::kAgentLost) {
      MarkLost(event->node);
      for_next_attempt.push_back(std::move(*event));
    }
    // Rank events here are late news of the attempt that just ended.
  }
  for (Event& event : for_next_attempt) events_.Push(std::move(event));
  return !cancelled;
}

absl::Status JobController::StartAttempt(int attempt, std::vector<bool>* node_started) {
  const LaunchPlan& plan = plan_;
  RankEnvironmentInputs env = spec_.environment;
  env.attempt = attempt;
  env.max_restarts = spec_.max_restarts;
  if (spec_.attempt_environment) {
    for (const auto& [key, value] : spec_.attempt_environment(attempt)) env.passthrough[key] = value;
  }
  node_started->assign(plan.nodes.size(), false);
  const int rank0_node = plan.ranks.front().node_index;
  if (!spec_.node_addresses.empty()) {
    // MASTER_ADDR follows rank 0's host, which an elastic shrink can change.
    env.master_addr = spec_.node_addresses[active_[rank0_node]];
  }
  if (env.master_port == 0) {
    auto port = agents_[active_[rank0_node]]->ReservePort();
    if (!port.ok()) return port.status();
    env.master_port = *port;
  }
  std::vector<StartRanksRequest> requests = BuildStartRanksRequests(
      plan, env, RankProgram{spec_.program, spec_.no_local_rank, spec_.working_dir});
  for (size_t node = 0; node < plan.nodes.size(); ++node) {
    requests[node].set_job_id(spec_.job_id);
    requests[node].set_attempt(attempt);
    requests[node].set_lease_ms(spec_.lease.count());
    requests[node].set_heartbeat_timeout_ms(spec_.heartbeat_timeout.count());
  }
  // Every host at once: start-up time does not grow with the number of hosts.
  std::vector<std::future<absl::Status>> started;
  for (size_t node = 0; node < plan.nodes.size(); ++node) {
    started.push_back(std::async(std::launch::async, [this, node, &requests] {
      return agents_[active_[node]]->StartRanks(requests[node]);
    }));
  }
  absl::Status first_error;
  for (size_t node = 0; node < started.size(); ++node) {
    absl::Status status = started[node].get();
    (*node_started)[node] = status.ok();
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  return first_error;
}

void JobController::BeginStop(int attempt, std::chrono::milliseconds grace,
                              const std::string& reason, int only_agent) {
  for (int index : active_) {
    if (only_agent >= 0 && index != only_agent) continue;
    // A lost agent would only time out; its lease stops its ranks.
    if (lost_agents_.count(index)) continue;
    AgentClient* agent = agents_[index];
    stop_threads_.emplace_back([this, agent, attempt, grace, reason] {
      absl::Status stopped = agent->StopJob(spec_.job_id, attempt, grace, reason);
      if (!stopped.ok()) notice_(absl::StrCat("could not stop ranks: ", stopped.message()));
    });
  }
}

AttemptReport JobController::RunAttempt(int attempt, const AttemptReport* previous) {
  AttemptReport report;
  report.attempt = attempt;
  const LaunchPlan& plan = plan_;
  log_->Append(JobEvent("attempt_start").Int("attempt", attempt).Int("world_size", plan.world_size()));
  auto now_us = [] { return absl::ToUnixMicros(absl::Now()); };
  if (output_ != nullptr) {
    absl::Status ready = output_->OnAttemptStarted(attempt);
    if (!ready.ok()) {
      report.end = ATTEMPT_STARTUP_FAILURE;
      report.exit_code = 1;
      report.cause = std::string(ready.message());
      report.startup_error = report.cause;
      report.failed_unix_us = report.all_gone_unix_us = now_us();
      SetState(JOB_STOPPING);
      return report;
    }
  }

  std::set<int> live;
  for (const auto& rank : plan.ranks) live.insert(rank.global_rank);
  bool stopping = false;
  int64_t last_stopped_us = 0;
  // For all_gone_unix_us: the latest end reported, and whether every rank
  // that was started reported one.
  int64_t last_end_us = 0;
  bool every_end_reported = true;
  std::chrono::steady_clock::time_point teardown_deadline;
  auto begin_stop = [&](std::chrono::milliseconds grace, const std::string& reason) {
    if (state_ != JOB_STOPPING) SetState(JOB_STOPPING);  // a preemption may be under way
    stopping = true;
    teardown_deadline = std::chrono::steady_clock::now() + grace + spec_.teardown_margin;
    BeginStop(attempt, grace, reason);
  };
  auto fail = [&](AttemptEnd end, int exit_code, std::string cause, std::string startup_error,
                  std::vector<std::string> tail, int64_t at_us, int blamed_agent = -1) {
    if (stopping) return;
    report.blamed_agent = blamed_agent;
    report.end = end;
    report.exit_code = exit_code;
    report.cause = std::move(cause);
    report.startup_error = std::move(startup_error);
    report.stderr_tail = std::move(tail);
    report.failed_unix_us = at_us;
    notice_(absl::StrCat("attempt ", attempt, ": ", report.cause, "; stopping every rank"));
    begin_stop(spec_.stop_grace, report.cause);
  };
  // Note [Preemption]: SIGTERM/SIGUSR1 ask the ranks (through the store) to
  // save a checkpoint at their next step boundary and exit; only when they
  // have not within the grace are they stopped.
  bool preempting = false;
  std::chrono::steady_clock::time_point preempt_deadline;
  // The attempt ends as cancelled by this signal (128 + signal).
  auto cancel_for = [&](int signal_number) {
    report.end = ATTEMPT_CANCELLED;
    report.exit_code = 128 + signal_number;
    report.cause = absl::StrCat("dslaunch received SIG", sigabbrev_np(signal_number));
    report.failed_unix_us = now_us();
  };
  auto on_signal = [&](int signal_number) {
    const bool can_preempt = spec_.preempt_grace.count() > 0 && spec_.request_checkpoint &&
                             (signal_number == SIGTERM || signal_number == SIGUSR1);
    if (!stopping && !preempting && can_preempt) {
      RecordSignal(attempt, signal_number, "checkpoint_and_stop");
      preempting = true;
      preempt_deadline = std::chrono::steady_clock::now() + spec_.preempt_grace;
      cancel_for(signal_number);
      notice_(absl::StrCat(report.cause, "; asking every rank to save a checkpoint and stop (",
                           spec_.preempt_grace.count(), " ms grace; again to stop now)"));
      SetState(JOB_STOPPING);  // (3): the job is stopping, the ranks first checkpoint
      spec_.request_checkpoint(attempt);
      return;
    }
    RecordSignal(attempt, signal_number, stopping ? "kill" : "stop");
    if (preempting && !stopping) {
      notice_("stopping every rank without waiting for their checkpoint");
      begin_stop(spec_.stop_grace, report.cause);
      return;
    }
    if (!stopping) {
      cancel_for(signal_number);
      notice_(absl::StrCat(report.cause, "; stopping every rank (again to skip the ",
                           spec_.stop_grace.count(), " ms grace)"));
      begin_stop(spec_.stop_grace, report.cause);
    } else {
      notice_("stopping every rank now (SIGKILL)");
      begin_stop(std::chrono::milliseconds(0), "second stop signal");
    }
  };

  std::vector<bool> node_started;
  absl::Status started = StartAttempt(attempt, &node_started);
  for (size_t node = 0; node < node_started.size(); ++node) {
    if (node_started[node]) continue;
    for (int rank : plan.RanksOfNode(static_cast<int>(node))) live.erase(rank);
  }
  if (!started.ok()) {
    fail(ATTEMPT_STARTUP_FAILURE, 1, absl::StrCat("could not start the ranks: ", started.message()),
         std::string(started.message()), {}, now_us());
  } else {
    report.started_unix_us = now_us();
    SetState(JOB_RUNNING);
    if (previous != nullptr) LogRecovery(*previous, report);
  }

  // Hang detection: the progress marker must change within
  // spec_.hang_timeout once it has appeared. With heartbeats it is every
  // rank's step (Note [Rank heartbeats]); otherwise what the ranks publish
  // in the store (dsrank: rank 0's step).
  std::map<int, RankProgress> heartbeats;  // the newest of each rank
  bool first_step_logged = false;
  std::optional<std::string> last_progress;
  auto last_progress_change = std::chrono::steady_clock::now();
  auto next_progress_check = last_progress_change;
  auto progress_marker = [&]() -> std::optional<std::string> {
    if (!heartbeats.empty()) {
      std::vector<std::string> steps;
      for (const auto& [rank, beat] : heartbeats) steps.push_back(absl::StrCat(beat.step()));
      if (std::all_of(heartbeats.begin(), heartbeats.end(), [](const auto& b) { return b.second.step() < 0; })) {
        return std::nullopt;  // no rank finished a step yet: still starting
      }
      return absl::StrCat("steps ", absl::StrJoin(steps, ","));
    }
    return spec_.read_progress ? spec_.read_progress(attempt) : std::nullopt;
  };
  auto fail_as_hang = [&](std::string cause) {
    if (stopping) return;
    absl::StrAppend(&cause, DiagnoseHang(attempt, heartbeats));
    fail(ATTEMPT_HANG, 1, std::move(cause), "", {}, now_us());
  };
  auto check_progress = [&] {
    if (spec_.hang_timeout.count() <= 0 || stopping) return;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_progress_check) return;
    next_progress_check = now + std::min<std::chrono::milliseconds>(
                                    std::chrono::milliseconds(500), spec_.hang_timeout / 4);
    // Note [Honest exits]: time dslaunch itself spent frozen is no time the
    // ranks went without progress (it just could not look).
    if (auto freeze = freeze_watch_->LongestSince(last_progress_change)) {
      last_progress_change = std::max(last_progress_change, freeze->end);
    }
    std::optional<std::string> progress = progress_marker();
    if (progress != last_progress) {
      last_progress = progress;
      last_progress_change = now;
      return;
    }
    if (!last_progress || now - last_progress_change < spec_.hang_timeout) return;
    const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress_change);
    fail_as_hang(absl::StrCat("no training progress for ", idle.count(),
                              " ms while every rank is alive (last: ", *last_progress, ")"));
  };

  while (!live.empty()) {
    check_progress();
    auto deadline = stopping ? teardown_deadline
                             : std::chrono::steady_clock::now() + std::chrono::seconds(1);
    if (preempting && !stopping) deadline = std::min(deadline, preempt_deadline);
    if (!stopping && spec_.hang_timeout.count() > 0) deadline = std::min(deadline, next_progress_check);
    std::optional<Event> event = events_.PopUntil(deadline);
    // Note [Honest exits]: before what arrived is judged, so that news of a
    // freeze comes first.
    NoteFreezes(attempt);
    if (!event) {
      if (preempting && !stopping && std::chrono::steady_clock::now() >= preempt_deadline) {
        notice_(absl::StrCat(live.size(), " rank(s) did not stop within the ",
                             spec_.preempt_grace.count(), " ms checkpoint grace; stopping them"));
        begin_stop(spec_.stop_grace, report.cause);
        continue;
      }
      if (stopping && std::chrono::steady_clock::now() >= teardown_deadline) {
        notice_(absl::StrCat("attempt ", attempt, ": ", live.size(),
                             " rank(s) did not report their end in time (",
                             absl::StrJoin(live, ","), "); treating them as lost"));
        every_end_reported = false;
        break;
      }
      continue;
    }
    if (event->kind == Event::kSignal) {
      on_signal(event->signal_number);
      continue;
    }
    if (event->kind == Event::kHostBack) {
      // Note [Membership]: take it back in at a checkpoint boundary.
      const int index = event->node;
      const bool planned_out = std::find(active_.begin(), active_.end(), index) == active_.end();
      if (!lost_agents_.count(index) || !planned_out || Blacklisted(index) || stopping || preempting ||
          !spec_.request_checkpoint || spec_.min_nodes <= 0) {
        continue;  // a restart's replan takes it back if it still answers
      }
      const std::string& host = agents_[index]->host();
      log_->Append(JobEvent("host_back").Int("attempt", attempt).Text("host", host));
      preempting = true;
      preempt_deadline = std::chrono::steady_clock::now() +
                         (spec_.preempt_grace.count() > 0 ? spec_.preempt_grace : std::chrono::milliseconds(kDefaultPreemptGraceMs));
      report.end = ATTEMPT_RESCALED;
      report.exit_code = 0;
      report.cause = absl::StrCat("host ", host, " is back");
      report.failed_unix_us = now_us();
      notice_(absl::StrCat("host ", host, " is back; asking every rank to save a checkpoint and stop, to restart "
                           "with it"));
      SetState(JOB_STOPPING);
      spec_.request_checkpoint(attempt);
      continue;
    }
    if (event->kind == Event::kAgentLost) {
      MarkLost(event->node);
      const auto in_plan = std::find(active_.begin(), active_.end(), event->node);
      if (in_plan == active_.end()) continue;  // dropped from the plan already
      const std::string& host = agents_[event->node]->host();
      std::vector<int> node_ranks = plan.RanksOfNode(static_cast<int>(in_plan - active_.begin()));
      const std::optional<FreezeWatch::Freeze> freeze = RecentFreeze(/*for_lost_stream=*/true);
      log_->Append(JobEvent("host_lost")
                       .Int("attempt", attempt)
                       .Text("host", host)
                       .Text("error", event->lost.message())
                       .Int("controller_frozen_ms", freeze ? freeze->duration().count() : 0));
      // Note [Honest exits]: a stream that broke while dslaunch was frozen
      // says nothing against the host.
      if (auto frozen = AttributeLostStream(host, event->lost, freeze, lease_timing())) {
        fail(frozen->end, 1, frozen->cause, "", {}, now_us());
        // The host is fine: watch it again, and stop its ranks too rather
        // than leave them to its lease.
        if (WatchAgent(event->node).ok()) {
          lost_agents_.erase(event->node);
          lost_flags_[event->node] = false;
          BeginStop(attempt, spec_.stop_grace, frozen->cause, event->node);
        }
      } else {
        fail(ATTEMPT_HOST_LOST, 1, absl::StrCat("lost host ", host, " (", event->lost.message(), ")"), "", {},
             now_us(), event->node);
      }
      for (int rank : node_ranks) {
        if (live.erase(rank) > 0) every_end_reported = false;
      }
      continue;
    }
    const RankEvent& rank_event = event->rank_event;
    if (rank_event.attempt() != attempt) continue;  // late news of an earlier attempt
    const int rank = rank_event.global_rank();
    const std::string& host = plan.nodes[plan.ranks[rank].node_index].host;
    if (rank_event.has_output()) {
      if (output_ != nullptr) {
        output_->OnLine(attempt, rank, host, rank_event.output().is_stderr(),
                        rank_event.output().line());
      }
      continue;
    }
    if (rank_event.has_progress()) {
      const RankProgress& progress = rank_event.progress();
      if (progress.missed_heartbeat_ms() > 0) {
        log_->Append(JobEvent("heartbeat_missed")
                         .Int("attempt", attempt)
                         .Int("rank", rank)
                         .Text("host", host)
                         .Int("quiet_ms", progress.missed_heartbeat_ms()));
        fail_as_hang(absl::StrCat("rank ", rank, " on ", host, " sent no heartbeat for ",
                                  progress.missed_heartbeat_ms(),
                                  " ms while its process lives (frozen or stopped)"));
      } else {
        heartbeats[rank] = progress;
        // Recovery timing: the first step any rank finishes after a restart.
        if (previous != nullptr && !first_step_logged && progress.step() >= 0 && previous->failed_unix_us > 0) {
          first_step_logged = true;
          const int64_t after_us = now_us() - previous->failed_unix_us;
          log_->Append(JobEvent("first_step")
                           .Int("attempt", attempt)
                           .Int("step", progress.step())
                           .Int("failure_to_first_step_us", after_us));
          notice_(absl::StrCat("recovery: attempt ", attempt, " finished step ", progress.step(), " ",
                               after_us / 1000.0, " ms after the failure"));
        }
      }
      continue;
    }
    if (!rank_event.has_ended()) continue;
    const RankEnded& ended = rank_event.ended();
    live.erase(rank);
    last_end_us = std::max(last_end_us, ended.ended_unix_us());
    if (ended.stopped_by_agent() && stopping) {
      ++report.stopped_ranks;  // this controller's own teardown
      last_stopped_us = std::max(last_stopped_us, ended.ended_unix_us());
    } else if (ended.stopped_by_agent()) {
      // Note [Honest exits]: stopped, but not by us: the attempt fails,
      // naming who stopped the rank and why.
      const StopAttribution why = AttributeUnexpectedStop(rank, host, ended, RecentFreeze(), lease_timing());
      LogRankFailure(attempt, rank, host, ended, why.cause);
      fail(why.end, 1, why.cause, "", {ended.stderr_tail().begin(), ended.stderr_tail().end()},
           ended.ended_unix_us(), why.blame_host ? active_[plan.ranks[rank].node_index] : -1);
    } else if (IsFailure(ended)) {
      std::string cause = DescribeEnd(rank, host, ended);
      LogRankFailure(attempt, rank, host, ended, cause);
      fail(ClassifyEnd(ended), ExitCodeOf(ended), cause,
           ended.state() == RANK_LOST ? ended.detail() : std::string(),
           {ended.stderr_tail().begin(), ended.stderr_tail().end()}, ended.ended_unix_us(),
           active_[plan.ranks[rank].node_index]);
    }
  }

  for (auto& thread : stop_threads_) thread.join();
  stop_threads_.clear();
  if (preempting && !stopping) {
    // Every rank saved its checkpoint and left by itself: a clean
    // preemption, reported as the signal it answers (CANCELLED, 128+signal),
    // or a rescale (RESCALED) that restarts at once.
    notice_("every rank saved its checkpoint and stopped");
    report.all_gone_unix_us = last_end_us;
    return report;
  }
  if (!stopping) {
    report.end = ATTEMPT_SUCCEEDED;
    report.exit_code = 0;
    report.all_gone_unix_us = last_end_us;
    return report;
  }
  report.all_gone_unix_us = every_end_reported && last_end_us > 0 ? last_end_us : now_us();
  if (report.failed_unix_us > 0 && last_stopped_us > 0) {
    report.teardown_us = std::max<int64_t>(0, last_stopped_us - report.failed_unix_us);
  }
  return report;
}

}  // namespace dslaunch
