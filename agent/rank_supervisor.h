// Supervises one rank process from spawn to reap, on a thread of its own.
//
// The thread spawns the rank's keeper (so the keeper's parent-death signal is
// tied to a thread that lives exactly as long as the keeper), then polls the
// rank's stdout, stderr and the keeper's pidfd: every complete line becomes a
// RankOutput event,
// the exit becomes one RankEnded event carrying the last stderr lines. When the
// rank's main process ends, its keeper kills whatever it left running, in its
// process group or not: a finished rank leaves no orphans (Note [Rank keeper]
// in agent/process_spawner.h).
//
// Thread-safe: Stop() and accessors may be called from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "agent/process_spawner.h"
#include "agent/rank_state.h"
#include "proto/agent.pb.h"

namespace dslaunch {

// Why the agent stops a rank; the first stop's cause is the one its
// RankEnded reports (stop_reason, stop_detail, controller_silent_ms).
struct RankStopCause {
  StopReason reason = STOP_REASON_UNSPECIFIED;
  std::string detail;
  int64_t controller_silent_ms = 0;
};

class RankSupervisor {
 public:
  using EventSink = std::function<void(RankEvent)>;

  // Starts the supervising thread, which spawns the rank at once. Events go to
  // `sink` from that thread, in order.
  RankSupervisor(int attempt, int global_rank, SpawnRequest request, EventSink sink);
  // Stops the rank (SIGKILL, no grace) if it still runs, and joins the thread.
  ~RankSupervisor();

  RankSupervisor(const RankSupervisor&) = delete;
  RankSupervisor& operator=(const RankSupervisor&) = delete;

  using StopCause = RankStopCause;

  // Sends SIGTERM to the rank's process group, then SIGKILL after `grace`.
  // Returns false when the rank had already ended. Idempotent; a later call can
  // only shorten the grace (and does not change the cause).
  bool Stop(std::chrono::milliseconds grace, RankStopCause cause = RankStopCause());

  // Waits until the spawn was attempted; returns the pid, or 0 if it failed.
  pid_t WaitForSpawn();

  // Waits until the rank has ended and its RankEnded event was emitted.
  void WaitEnded();

  bool ended() const { return ended_.load(); }
  // The rank's pid once spawned; 0 before or when the spawn failed.
  pid_t pid();
  int attempt() const { return attempt_; }
  int global_rank() const { return global_rank_; }
  // SPAWNING, RUNNING, or how it ended (EXITED, KILLED, LOST); for reports.
  RankState state();

  // How many stderr lines RankEnded carries.
  static constexpr size_t kStderrTailLines = 20;
  // Longer lines are split: a rank printing without newlines cannot grow memory.
  static constexpr size_t kMaxLineBytes = 64 * 1024;

 private:
  void Run(SpawnRequest request);
  void Supervise(const SpawnedProcess& process);
  void Emit(RankEvent event);
  void EmitEnded(RankState state, int exit_code, int signal, const std::string& detail);

  const int attempt_;
  const int global_rank_;
  EventSink sink_;

  std::mutex mu_;
  std::condition_variable spawn_cv_;
  std::condition_variable ended_cv_;
  bool spawn_attempted_ = false;         // guarded by mu_
  pid_t pid_ = 0;                        // guarded by mu_
  bool stop_requested_ = false;          // guarded by mu_
  StopCause stop_cause_;                 // of the first Stop(); guarded by mu_
  RankState end_state_ = RANK_STATE_UNSPECIFIED;  // once ended; guarded by mu_
  std::chrono::steady_clock::time_point kill_deadline_;  // guarded by mu_
  int wake_fd_ = -1;                     // eventfd that interrupts the poll loop

  std::atomic<bool> ended_{false};
  RankLifecycle lifecycle_;              // touched by the supervising thread only
  std::deque<std::string> stderr_tail_;  // supervising thread only
  std::thread thread_;
};

}  // namespace dslaunch
