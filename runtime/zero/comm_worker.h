// One thread that runs a rank's ZeRO-3 collectives in the order they were
// submitted (Note [ZeRO-3 prefetch]): the training thread keeps computing
// while the next unit is gathered and the last one's gradients are
// reduce-scattered. Every rank submits the same sequence, so the collectives
// match across ranks as if they ran inline.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "absl/status/status.h"

namespace dslaunch::runtime {

class CommWorker {
 public:
  CommWorker();
  ~CommWorker();  // runs what is queued, then joins

  std::shared_future<absl::Status> Submit(std::function<absl::Status()> work);
  // Waits until everything submitted so far has run; the first error since
  // the last Drain, or OK.
  absl::Status Drain();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::pair<std::function<absl::Status()>, std::promise<absl::Status>>> queue_;  // guarded by mu_
  bool busy_ = false;                  // guarded by mu_
  bool stopping_ = false;              // guarded by mu_
  absl::Status first_error_;           // guarded by mu_
  std::thread thread_;
};

}  // namespace dslaunch::runtime
