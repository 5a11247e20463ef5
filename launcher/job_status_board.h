// The controller's live picture of its job, for the people watching it.
//
// Note [Live job status]
// The job controller writes what it learns onto a JobStatusBoard as it
// happens: state changes, each attempt's ranks and hosts, every rank's start,
// heartbeats (step and the RankMetrics a training loop sends: loss,
// tokens/s, ...), ends, the cause of a failed attempt, and each checkpoint
// rank 0 commits. Two readers take snapshots (JobStatusReply,
// proto/controller.proto) from other threads:
//   - `dslaunch status`, over the Controller RPC on the store's port
//     (launcher/controller_status_service.h), found through the job's status
//     file (launcher/job_status_file.h);
//   - the controller's Prometheus endpoint, --metrics_addr
//     (launcher/prometheus_metrics.h).
// Nothing here decides anything: the board only records, so a slow reader
// can never delay fail-fast. Ages and the ETA are computed at snapshot time.
//
// The job's step is the slowest live rank's, and its rate is measured over
// this attempt's heartbeats (a restarted attempt starts a new rate: the
// rebuild and the resume are not training speed).
//
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "launcher/launch_plan.h"
#include "proto/controller.pb.h"

namespace dslaunch {

class JobStatusBoard {
 public:
  using Clock = std::chrono::steady_clock;

  JobStatusBoard(std::string job_id, int max_restarts);

  const std::string& job_id() const { return job_id_; }

  void SetState(JobState state);
  // A new attempt: every rank of `plan` is SPAWNING on its host, with no
  // step; the rate starts over.
  void StartAttempt(int attempt, const LaunchPlan& plan);
  void RankStarted(int attempt, int rank, int64_t pid);
  // `at`: when it arrived (tests pass their own clock).
  void Heartbeat(int attempt, int rank, const RankProgress& progress, Clock::time_point at = Clock::now());
  // RankStatus.end says how, in a few words ("exited 0", "SIGKILL",
  // "stopped", "lost: <why>").
  void RankFinished(int attempt, int rank, const RankEnded& ended);
  // The cause of an attempt that failed (the newest one stays).
  void AttemptFailed(std::string cause);
  // Restarts that used the budget so far (a rescale uses none).
  void SetRestartsUsed(int used);
  void CheckpointCommitted(std::string tag);

  JobStatusReply Snapshot() const { return Snapshot(Clock::now()); }
  // At `now` (tests).
  JobStatusReply Snapshot(Clock::time_point now) const;

 private:
  struct Rank {
    RankStatus status;                        // age fields unset
    std::optional<Clock::time_point> beat_at;  // the newest heartbeat
  };
  // Heartbeats of the job's step: the first of this attempt and the newest.
  struct StepSample {
    int64_t step = -1;
    Clock::time_point at;
  };

  static int64_t UnixMs();

  const std::string job_id_;
  mutable std::mutex mu_;
  JobStatusReply job_;      // the job's own fields; guarded by mu_
  std::vector<Rank> ranks_;  // by global rank; guarded by mu_
  StepSample first_;        // guarded by mu_
  StepSample latest_;       // guarded by mu_
};

}  // namespace dslaunch
