// dslaunch's stop signals: blocked in every thread, taken by one thread and
// forwarded to the controller.
//
// Note [Interruptible planning]
// The forwarder runs from Main's first line. Until EndPlanning() nothing has
// started that must be stopped (no agent, no rank), so a stop signal ends the
// process at once with 128+signal (nothing is on disk to remove: local
// agents get their token on stdin), however long
// planning takes: reading inputs, a static agent that does not answer
// Describe, a large --dry_run. From EndPlanning() until Attach() a signal is
// kept in pending(); after Attach() the controller stops the job.
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "launcher/job_controller.h"

namespace dslaunch {

// Blocks SIGINT, SIGTERM, SIGHUP, SIGUSR1 (the stop signals) and SIGUSR2
// (the forwarder's own shutdown poke) in the calling thread, and so in every
// thread it starts later; returns that set. Call before any thread exists.
sigset_t BlockStopSignals();

// Thread-safe: the forwarding thread and the caller's share mu_.
class SignalForwarder {
 public:
  // `signals`: from BlockStopSignals(). `notice` prints the line said when a
  // signal ends the process while planning.
  SignalForwarder(sigset_t signals, std::function<void(const std::string&)> notice);
  ~SignalForwarder();
  SignalForwarder(const SignalForwarder&) = delete;
  SignalForwarder& operator=(const SignalForwarder&) = delete;

  // From here on, signals wait for the controller (Note [Interruptible planning]).
  void EndPlanning();
  // Forwards every later signal, and the pending one, to `controller`; null: keep them pending again.
  void Attach(JobController* controller);
  // The first signal received after EndPlanning() and before Attach(), or 0.
  int pending();

 private:
  void Forward();
  // REQUIRES: mu_ held (EndPlanning cannot return while the process exits).
  [[noreturn]] void ExitWhilePlanning(int signal_number);

  sigset_t signals_;
  const std::function<void(const std::string&)> notice_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  bool planning_ = true;                 // guarded by mu_
  JobController* controller_ = nullptr;  // guarded by mu_
  int pending_ = 0;                      // guarded by mu_
  std::thread thread_;
};

}  // namespace dslaunch
