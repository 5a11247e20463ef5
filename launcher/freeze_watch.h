// Notices that this process did not run for a while: SIGSTOP (Ctrl-Z, a
// debugger), a suspended VM, a machine deep in swap. Every thread of a frozen
// process stops, so a thread that only sleeps `tick` and looks at the
// monotonic clock sees the gap when it runs again; CLOCK_MONOTONIC keeps
// counting while the process is stopped.
//
// The controller uses it to tell the truth after a freeze (Note [Honest
// exits], job_controller.h): the agents' leases expired or their streams
// broke because dslaunch itself was frozen, not because a host was lost.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace dslaunch {

class FreezeWatch {
 public:
  using Clock = std::chrono::steady_clock;
  struct Freeze {
    Clock::time_point start;  // the last moment the process was seen running
    Clock::time_point end;    // when it was seen running again
    std::chrono::milliseconds duration() const {
      return std::chrono::duration_cast<std::chrono::milliseconds>(end - start);
    }
  };

  // A gap of at least `threshold` between two looks at the clock is a freeze.
  // With `tick` > 0 a thread looks every `tick` (tick must be well below
  // threshold); with tick 0 nothing watches and only Record() adds freezes
  // (tests).
  FreezeWatch(std::chrono::milliseconds tick, std::chrono::milliseconds threshold);
  ~FreezeWatch();  // stops the thread

  FreezeWatch(const FreezeWatch&) = delete;
  FreezeWatch& operator=(const FreezeWatch&) = delete;

  // Adds a freeze as if the thread had seen it (tests).
  void Record(Freeze freeze);

  // Freezes not returned before, oldest first. A freeze that is just ending,
  // which the thread has not woken up to see yet, is included: a caller that
  // runs first after a SIGCONT still learns of it.
  std::vector<Freeze> TakeNew();

  // The longest freeze (returned by TakeNew or not) that ended at or after
  // `since`, if any.
  std::optional<Freeze> LongestSince(Clock::time_point since);

  std::chrono::milliseconds threshold() const { return threshold_; }

 private:
  void Run();
  // The gap since the thread's last look, as a freeze, if it is one; mu_ held.
  std::optional<Freeze> OngoingLocked(Clock::time_point now) const;
  void AddLocked(Freeze freeze);

  const std::chrono::milliseconds tick_;
  const std::chrono::milliseconds threshold_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;                 // guarded by mu_
  Clock::time_point last_look_;           // guarded by mu_
  std::vector<Freeze> freezes_;           // every one seen, oldest first; guarded by mu_
  Clock::time_point taken_until_;         // start of the newest freeze TakeNew returned; guarded by mu_
  std::thread thread_;
};

}  // namespace dslaunch
