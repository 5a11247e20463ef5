// One attempt of a job as the controller runs it: what the attempt knows
// (its live ranks, its phase and deadlines, the ranks' progress, the report
// taking shape) and one method per event of the controller's loop
// (launcher/controller_event_loop.h). JobController::RunAttempt makes one,
// Start()s it, runs the event loop on it until it is over, and Finish()es it.
//
// The attempt's phases (the job's state in brackets):
//
//                 (1) a stop signal with a checkpoint grace (Note [Preemption]),
//                     or a lost host back (Note [Membership])
//      RUNNING ──────────────────────────────────────────────▶ CHECKPOINTING
//     [RUNNING]                                                  [STOPPING]
//        │ (2) a rank failed, a host was lost, a hang,              │ (3) a rank failed, the grace ran
//        │     a stop signal, the ranks could not start             │     out, or a second stop signal
//        │                                                          ▼
//        └──────────────────────────────────────────────────▶ STOPPING ── (4) every rank ended, or
//                                                             [STOPPING]     the teardown deadline ──▶ over
//      RUNNING ── (5) every rank exited by itself ──▶ over: SUCCEEDED if every one exited 0
//      CHECKPOINTING ── (6) every rank exited by itself ──▶ over: CANCELLED (the signal) or RESCALED
//
// Only EnterCheckpointing() and EnterStopping() change the phase. The first
// failure is the attempt's cause (Fail() is ignored once stopping): what
// happens during the teardown is its consequence.
//
// Thread-safety: none needed. An AttemptState lives on the stack of
// JobController::RunAttempt and every method runs on the controller's event
// loop thread; it reads and writes the controller's event-loop-only members
// (lost_agents_, active_, ...) as the controller's own methods do.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "launcher/attempt_report.h"
#include "launcher/controller_event_loop.h"
#include "launcher/job_controller.h"

namespace dslaunch {

class JobController::AttemptState final : public ControllerEventHandler {
 public:
  // `previous`: the attempt before (recovery timing), or null. Both must
  // outlive this object.
  AttemptState(JobController& job, int attempt, const AttemptReport* previous);

  // Opens the rank output and starts every rank. False when the attempt
  // ended before any rank started (report() says why; nothing to wait for).
  bool Start();
  // After the loop: how the attempt ended.
  AttemptReport Finish();
  const AttemptReport& report() const { return report_; }

  // ControllerEventHandler.
  bool Over() const override { return live_.empty() || gave_up_waiting_; }
  void OnTurn() override { CheckProgress(); }
  std::chrono::steady_clock::time_point WakeAt() override;
  // Note [Honest exits]: news of a freeze comes before what arrived is judged.
  void OnWoken() override { job_.NoteFreezes(attempt_); }
  void OnTick() override;
  void OnRankEvent(int node, const RankEvent& event) override;
  void OnAgentLost(int node, const absl::Status& why) override;
  void OnHostBack(int node) override;
  void OnStopSignal(int signal_number) override;

 private:
  enum class Phase { kRunning, kCheckpointing, kStopping };

  // What Fail() records as the attempt's cause.
  struct Failure {
    Failure(AttemptEnd end, std::string cause, int64_t at_us)
        : end(end), cause(std::move(cause)), at_us(at_us) {}
    AttemptEnd end;
    std::string cause;
    int64_t at_us;  // Unix µs: the failing rank's end (its agent's clock) or now
    int exit_code = 1;
    std::string startup_error;
    std::vector<std::string> stderr_tail;
    int blamed_agent = -1;
  };

  // Timed events, from OnTick.
  void OnCheckpointGraceOver();
  void OnTeardownDeadline();
  // The kinds of rank event.
  void OnRankOutput(int rank, const std::string& host, const RankOutput& output);
  void OnHeartbeat(int rank, const RankProgress& progress);
  void OnMissedHeartbeat(int rank, const std::string& host, const RankProgress& progress);
  void OnRankEnded(int rank, const std::string& host, const RankEnded& ended);

  // (2), (3): records the first failure as the cause and stops every rank.
  void Fail(Failure failure);
  // (1): asks every rank, through the store, to save a checkpoint and exit
  // within `grace`.
  void EnterCheckpointing(std::chrono::milliseconds grace);
  // (2), (3): StopJob to every agent; ranks not ended by the grace plus the
  // teardown margin count as lost.
  void EnterStopping(std::chrono::milliseconds grace, const std::string& reason);
  // The attempt ends as cancelled by this signal (128 + signal).
  void CancelFor(int signal_number);

  // Hang detection: the progress marker must change within
  // spec_.hang_timeout once it has appeared.
  void CheckProgress();
  std::optional<std::string> ProgressMarker() const;
  void FailAsHang(std::string cause);

  // The agent (index into the controller's agents) running `rank`.
  int AgentOfRank(int rank) const;
  const std::string& HostOfRank(int rank) const;
  void Notice(const std::string& line) { job_.notice_(line); }

  JobController& job_;
  const JobSpec& spec_;
  const LaunchPlan& plan_;  // the controller's plan of this attempt
  const int attempt_;
  const AttemptReport* const previous_;
  AttemptReport report_;
  Phase phase_ = Phase::kRunning;

  std::set<int> live_;  // ranks started and not ended
  // For all_gone_unix_us: the latest end reported, whether every rank that
  // was started reported one, and the latest end of a rank this controller
  // stopped (the fail-fast figure).
  int64_t last_end_us_ = 0;
  bool every_end_reported_ = true;
  int64_t last_stopped_us_ = 0;
  bool gave_up_waiting_ = false;  // the teardown deadline passed with ranks live
  std::chrono::steady_clock::time_point teardown_deadline_;
  std::chrono::steady_clock::time_point checkpoint_deadline_;

  // Note [Rank heartbeats]: the newest heartbeat of each rank.
  std::map<int, RankProgress> heartbeats_;
  bool first_step_logged_ = false;
  std::optional<std::string> last_progress_;
  bool unarmed_noted_ = false;  // said that no step was reported within the hang timeout
  std::chrono::steady_clock::time_point last_progress_change_;
  std::chrono::steady_clock::time_point next_progress_check_;
};

}  // namespace dslaunch
