// The controller's job state machine: starts every rank of an attempt through
// the agents, watches them, fails the whole job fast, restarts up to
// --max_restarts times, and reports the root cause.
//
//                 (1)            (2)             (3) a rank failed, a host was
//   PLANNING ──────────▶ STARTING ──────▶ RUNNING ─── lost, or a stop signal ──▶ STOPPING
//                          ▲   │ (4) could not start                               │
//                          │   └──────────────────────────────────────────────────▶│
//                          │ (6) new attempt                                        │ (5) every rank gone
//                      RESTARTING ◀──── budget left, not cancelled ─────────────────┤
//                                                                                   ▼
//   RUNNING ── (7) every rank exited 0 ──▶ SUCCEEDED            FAILED | CANCELLED ◀┘ (8)
//   PLANNING ── (0) an agent's event stream cannot be opened ──▶ FAILED
//
// SetState() is the one function that changes the state; it refuses any edge
// not drawn here. Events arrive on one queue (rank events from every agent's
// stream, lost agents, signals) and are handled on the thread that calls Run().
//
// Fail-fast (Note [Fail-fast]): the first rank that ends badly makes the
// controller send StopJob to every agent at once (SIGTERM, then SIGKILL after
// --stop_grace_ms). Nothing waits on a collective timeout: a rank's exit is
// seen by its agent through a pidfd and reaches the controller over an open
// stream, so the other ranks are signalled within milliseconds.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/blocking_queue.h"
#include "launcher/agent_client.h"
#include "launcher/launch_plan.h"
#include "launcher/rank_output.h"
#include "proto/job.pb.h"

namespace dslaunch {

struct JobSpec {
  std::string job_id;
  LaunchPlan plan;
  std::vector<std::string> program;
  bool no_local_rank = false;
  std::string working_dir;
  // Everything but attempt and max_restarts (the controller fills those in);
  // master_port 0 means "ask rank 0's agent".
  RankEnvironmentInputs environment;
  int max_restarts = 0;
  std::chrono::milliseconds stop_grace{3000};
  std::chrono::milliseconds lease{10000};
  std::chrono::milliseconds keepalive_interval{1000};
  // After StopJob, how long beyond the grace to wait for ranks to report
  // their end before treating them as lost.
  std::chrono::milliseconds teardown_margin{5000};
};

// How one attempt ended.
struct AttemptReport {
  int attempt = 0;
  AttemptEnd end = ATTEMPT_END_UNSPECIFIED;
  int exit_code = 0;          // what dslaunch exits with if this is the last attempt
  std::string cause;          // one line: rank, host, code or signal
  std::vector<std::string> stderr_tail;  // of the failing rank
  // Fail-fast figure: from the failing rank's end to the last stopped rank's
  // end (agents' clocks); -1 when nothing had to be stopped.
  int64_t teardown_us = -1;
  int stopped_ranks = 0;
};

struct JobOutcome {
  JobState state = JOB_STATE_UNSPECIFIED;  // SUCCEEDED, FAILED or CANCELLED
  int exit_code = 0;
  std::vector<AttemptReport> attempts;
};

// Runs on the thread that calls Run(); OnSignal may be called from any thread.
class JobController {
 public:
  // `agents[i]` serves `spec.plan.nodes[i]`. `notice` receives the
  // controller's own one-line messages (root cause, fail-fast figure,
  // restarts, summary). `on_attempt_over` runs after every attempt (the store
  // drops its keys).
  JobController(JobSpec spec, std::vector<AgentClient*> agents, RankOutputSink* output,
                std::function<void(const std::string&)> notice,
                std::function<void(int attempt)> on_attempt_over = nullptr);

  JobOutcome Run();

  // A stop signal for dslaunch (SIGINT, SIGTERM): stop every rank and end the
  // job as CANCELLED with 128+signal. A second signal skips the grace.
  void OnSignal(int signal_number);

  JobState state() const { return state_; }

  // "rank 3 on node1 exited with code 7" etc.; exposed for tests.
  static std::string DescribeEnd(int rank, const std::string& host, const RankEnded& ended);

 private:
  struct Event {
    enum Kind { kRank, kAgentLost, kSignal } kind = kRank;
    int node = -1;
    RankEvent rank_event;
    absl::Status lost;
    int signal_number = 0;
  };

  void SetState(JobState next);
  AttemptReport RunAttempt(int attempt);
  // Starts every rank; `node_started[i]` says whether node i's agent took its ranks.
  absl::Status StartAttempt(int attempt, std::vector<bool>* node_started);
  void BeginStop(int attempt, std::chrono::milliseconds grace, const std::string& reason);
  void ReportAttempt(const AttemptReport& report);
  void Summarize(const JobOutcome& outcome);
  void KeepAliveLoop(AgentClient* agent);

  const JobSpec spec_;
  const std::vector<AgentClient*> agents_;
  RankOutputSink* const output_;
  const std::function<void(const std::string&)> notice_;
  const std::function<void(int)> on_attempt_over_;

  BlockingQueue<Event> events_;
  JobState state_ = JOB_PLANNING;
  // Signals seen so far (the event loop only).
  int signals_seen_ = 0;
  int first_signal_ = 0;
  std::vector<std::thread> stop_threads_;  // StopJob calls in flight
  std::atomic<bool> keepalive_running_{false};
  std::mutex keepalive_mu_;
  std::condition_variable keepalive_cv_;
};

}  // namespace dslaunch
