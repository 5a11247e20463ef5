#include "launcher/job_controller.h"

#include <signal.h>

#include <algorithm>
#include <future>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/for_each_concurrently.h"
#include "launcher/attempt_state.h"
#include "launcher/start_ranks_request.h"

namespace dslaunch {

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
  keepalive_pending_ = std::make_unique<std::atomic<bool>[]>(agents_.size());
  for (size_t i = 0; i < agents_.size(); ++i) {
    lost_flags_[i] = false;
    back_reported_[i] = false;
    keepalive_pending_[i] = false;
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
  if (board_ != nullptr) board_->SetState(next);
  log_->Append(JobEvent("state").Text("state", JobState_Name(next)).Int("attempt", attempt_));
}

void JobController::OnSignal(int signal_number) {
  events_.Push(ControllerEvent::Signal(signal_number));
}

void JobController::KeepAliveLoop() {
  std::vector<std::chrono::steady_clock::time_point> last_probe(agents_.size());
  std::unique_lock<std::mutex> lock(keepalive_mu_);
  while (keepalive_running_) {
    lock.unlock();
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < agents_.size(); ++i) {
      const int index = static_cast<int>(i);
      bool probe = false;
      if (lost_flags_[index].load()) {
        // Note [Membership]: is the lost host's agent back?
        if (spec_.rejoin_check.count() <= 0 || now - last_probe[index] < spec_.rejoin_check) continue;
        probe = true;
      }
      if (keepalive_pending_[index].exchange(true)) continue;  // the last one is unanswered
      if (probe) last_probe[index] = now;
      {
        std::lock_guard<std::mutex> counted(keepalive_mu_);
        ++keepalives_in_flight_;
      }
      // A lost agent otherwise shows up as a broken stream: the answer of a
      // plain keep-alive is not needed.
      agents_[index]->KeepAliveAsync(spec_.job_id, [this, index, probe](absl::Status status) {
        if (probe && status.ok() && !back_reported_[index].exchange(true)) {
          events_.Push(ControllerEvent::HostBack(index));
        }
        keepalive_pending_[index] = false;
        std::lock_guard<std::mutex> counted(keepalive_mu_);
        --keepalives_in_flight_;
        // Under the lock: StopKeepAlives returns (and the controller may go)
        // only after this callback has let go of it.
        keepalive_cv_.notify_all();
      });
    }
    lock.lock();
    keepalive_cv_.wait_for(lock, spec_.keepalive_interval, [&] { return !keepalive_running_; });
  }
  // No callback may outlive the controller.
  keepalive_cv_.wait(lock, [&] { return keepalives_in_flight_ == 0; });
}

void JobController::StartKeepAlives() {
  {
    std::lock_guard<std::mutex> lock(keepalive_mu_);
    keepalive_running_ = true;
  }
  keepalive_thread_ = std::thread([this] { KeepAliveLoop(); });
}

void JobController::StopKeepAlives() {
  {
    std::lock_guard<std::mutex> lock(keepalive_mu_);
    keepalive_running_ = false;
  }
  keepalive_cv_.notify_all();
  if (keepalive_thread_.joinable()) keepalive_thread_.join();
}

void JobController::AttachToHosts(const std::vector<std::string>& hosts) {
  const std::set<std::string> running(hosts.begin(), hosts.end());
  std::vector<HostSlots> nodes;
  active_.clear();
  for (size_t i = 0; i < agents_.size(); ++i) {
    const int index = static_cast<int>(i);
    if (running.count(spec_.plan.nodes[i].host)) {
      active_.push_back(index);
      nodes.push_back(spec_.plan.nodes[i]);
    } else {
      MarkLost(index);
    }
  }
  plan_ = BuildLaunchPlan(nodes);
}

bool JobController::WatchEveryAgent() {
  // Every agent at once (common/for_each_concurrently.h); a host a resumed
  // attempt does not run on is lost until Note [Membership] takes it back.
  std::vector<absl::Status> watching(agents_.size());
  ForEachConcurrently(agents_.size(), kAgentCallsInFlight, [&](size_t node) {
    if (!lost_agents_.count(static_cast<int>(node))) watching[node] = WatchAgent(static_cast<int>(node));
  });
  for (size_t node = 0; node < agents_.size(); ++node) {
    if (watching[node].ok()) continue;
    notice_(absl::StrCat("cannot watch the job on ", agents_[node]->host(), ": ", watching[node].message()));
    for (size_t opened = 0; opened < agents_.size(); ++opened) {
      if (watching[opened].ok() && !lost_agents_.count(static_cast<int>(opened))) agents_[opened]->StopWatch();
    }
    return false;
  }
  return true;
}

JobOutcome JobController::Run() {
  JobOutcome outcome;
  LogJobStart();
  // Note [Controller failover]: the running attempt's ranks are attached to,
  // not started; the streams first replay what this controller missed.
  if (spec_.resume) {
    attempt_ = spec_.resume->attempt;
    attaching_ = true;
    outcome.attempts = spec_.resume->earlier;
    if (!spec_.resume->hosts.empty()) AttachToHosts(spec_.resume->hosts);
  }
  const bool watching = WatchEveryAgent();
  if (!watching) {
    SetState(JOB_FAILED);  // (0)
    outcome.state = JOB_FAILED;
    outcome.exit_code = 1;
    LogJobEnd(outcome);
    return outcome;
  }
  StartKeepAlives();
  RunAttempts(&outcome);
  outcome.state = state_;
  // Note [Honest exits]: only a job that succeeded exits 0 (a rescale whose
  // restart finds too few hosts ends FAILED with its attempt's 0).
  if (outcome.state != JOB_SUCCEEDED && outcome.exit_code == 0) outcome.exit_code = 1;
  StopKeepAlives();
  for (AgentClient* agent : agents_) agent->StopWatch();
  Summarize(outcome);
  LogJobEnd(outcome);
  return outcome;
}

void JobController::RunAttempts(JobOutcome* outcome) {
  for (int attempt = attempt_;; ++attempt) {
    attempt_ = attempt;
    SetState(JOB_STARTING);
    AttemptReport report = RunAttempt(attempt, outcome->attempts.empty() ? nullptr : &outcome->attempts.back());
    outcome->attempts.push_back(report);
    LogAttemptEnd(report);
    if (on_attempt_over_) on_attempt_over_(attempt);
    outcome->exit_code = report.exit_code;
    if (report.end == ATTEMPT_SUCCEEDED) {
      SetState(JOB_SUCCEEDED);  // (7)
      return;
    }
    ReportAttempt(report);
    BlameHost(report);
    const RestartDecision decision = DecideRestart(outcome);
    if (!decision.restart || !ReplanMembership(attempt + 1)) {
      SetState(first_signal_ != 0 ? JOB_CANCELLED : JOB_FAILED);  // (8)
      return;
    }
    SetState(JOB_RESTARTING);  // (5)
    AnnounceRestart(*outcome, decision.backoff);
    if (!WaitBeforeRestart(attempt + 1, decision.backoff)) {
      outcome->exit_code = 128 + first_signal_;
      outcome->stop_note =
          absl::StrCat("SIG", sigabbrev_np(first_signal_), " while waiting to start attempt ", attempt + 1);
      SetState(JOB_CANCELLED);  // (9)
      return;
    }
  }
}

void JobController::AnnounceRestart(const JobOutcome& outcome, std::chrono::milliseconds backoff) {
  const AttemptReport& report = outcome.attempts.back();
  const int next = report.attempt + 1;
  if (report.end == ATTEMPT_RESCALED) {
    notice_(absl::StrCat("restarting the job: attempt ", next, " (a host came back; no restart used)"));
    return;
  }
  int used = 0;
  for (const auto& earlier : outcome.attempts) used += earlier.end == ATTEMPT_RESCALED ? 0 : 1;
  if (board_ != nullptr) board_->SetRestartsUsed(used);
  const std::string when = backoff.count() > 0 ? absl::StrCat(" in ", backoff.count(), " ms") : std::string();
  notice_(absl::StrCat("restarting the job: attempt ", next, " (restart ", used, " of ", spec_.max_restarts, ")",
                       when));
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

// The backoff before a restart as a phase of the event loop: a stop signal
// cancels the restart; a lost agent is marked lost and its event kept for
// the next attempt (which fails for it); rank events are late news of the
// attempt that just ended, and a returning host is left to the replan of a
// later restart: both are dropped.
class JobController::RestartBackoff final : public ControllerEventHandler {
 public:
  RestartBackoff(JobController& job, int next_attempt, std::chrono::milliseconds backoff)
      : job_(job), next_attempt_(next_attempt), deadline_(std::chrono::steady_clock::now() + backoff) {}

  // Even with no backoff, what is queued already is looked at (the first
  // turn): a signal that arrived after the attempt's last rank ended cancels
  // the restart.
  bool Over() const override { return waited_out_ || cancelled_; }
  std::chrono::steady_clock::time_point WakeAt() override { return deadline_; }
  void OnTick() override { waited_out_ = true; }
  void OnAgentLost(int node, const absl::Status& why) override {
    job_.MarkLost(node);
    for_next_attempt_.push_back(ControllerEvent::AgentLost(node, why));
  }
  void OnStopSignal(int signal_number) override {
    job_.RecordSignal(next_attempt_ - 1, signal_number, "cancel_restart");
    job_.notice_(absl::StrCat("dslaunch received SIG", sigabbrev_np(signal_number),
                              " while waiting to restart; not starting attempt ", next_attempt_));
    cancelled_ = true;
  }

  // Queues the kept events again; false when the restart was cancelled.
  bool Finish() {
    for (ControllerEvent& event : for_next_attempt_) job_.events_.Push(std::move(event));
    return !cancelled_;
  }

 private:
  JobController& job_;
  const int next_attempt_;
  const std::chrono::steady_clock::time_point deadline_;
  bool waited_out_ = false;
  bool cancelled_ = false;
  std::vector<ControllerEvent> for_next_attempt_;
};

bool JobController::WaitBeforeRestart(int next_attempt, std::chrono::milliseconds backoff) {
  RestartBackoff wait(*this, next_attempt, backoff);
  RunEventLoop(events_, wait);
  return wait.Finish();
}

absl::Status JobController::StartAttempt(int attempt, std::vector<bool>* node_started) {
  const LaunchPlan& plan = plan_;
  RankEnvironmentInputs env = spec_.environment;
  env.attempt = attempt;
  env.max_restarts = spec_.max_restarts;
  if (spec_.store_token_for_attempt) env.store_token = spec_.store_token_for_attempt(attempt);
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
    requests[node].set_run_as(spec_.run_as);
    if (spec_.bind_cores_to_rank) {  // Note [Core binding], agent/core_binding.h
      requests[node].mutable_core_binding()->set_enabled(true);
      requests[node].mutable_core_binding()->set_core_list(spec_.bind_core_list);
    }
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
  AttemptState state(*this, attempt, previous);
  if (!state.Start()) return state.report();
  RunEventLoop(events_, state);
  for (auto& thread : stop_threads_) thread.join();
  stop_threads_.clear();
  return state.Finish();
}

}  // namespace dslaunch
