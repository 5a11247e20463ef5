// One thread that runs a communicator's collectives in the order they were
// submitted, while the training thread keeps computing: ZeRO's (Note [ZeRO-3
// prefetch]: the next unit is gathered and the last one's gradients are
// reduce-scattered) and the tensor group's (Note [Overlapped input-gradient
// reduction]). Every rank submits the same sequence, so the collectives
// match across ranks as if they ran inline. On a GPU the thread queues its
// work on a stream of its own (Note [Comm stream]). The thread starts at the
// first Submit, so a worker nobody submits to costs no thread.
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

// A submitted task: Wait() blocks the host until the task has run, then makes
// the caller's current stream wait for the device work it queued.
class CommTicket {
 public:
  CommTicket(std::shared_future<absl::Status> status, std::shared_ptr<compat::StreamPoint> done)
      : status_(std::move(status)), done_(std::move(done)) {}
  absl::Status Wait() const;

 private:
  std::shared_future<absl::Status> status_;
  std::shared_ptr<compat::StreamPoint> done_;  // set by the worker before status_ is ready
};

class CommWorker {
 public:
  // `device`: where the collectives run; a CUDA device gives the thread its
  // own stream there.
  explicit CommWorker(torch::Device device = torch::kCPU);
  // Finishes the task in progress, drops (cancels) the ones not started, and
  // joins. Engines drain before every step ends, so a drop means an error.
  ~CommWorker();

  CommTicket Submit(std::function<absl::Status()> work);
  // Waits until everything submitted so far has run, and makes the caller's
  // current stream wait for its device work; the first error since the last
  // Drain, or OK.
  absl::Status Drain();

 private:
  struct Task {
    std::function<absl::Status()> work;
    std::promise<absl::Status> done;
    compat::StreamPoint submitted;  // the submitter's stream at Submit
    std::shared_ptr<compat::StreamPoint> finished;
  };
  void Loop();

  const torch::Device device_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Task> queue_;                              // guarded by mu_
  bool busy_ = false;                                   // guarded by mu_
  bool stopping_ = false;                               // guarded by mu_
  absl::Status first_error_;                            // guarded by mu_
  std::shared_ptr<compat::StreamPoint> last_finished_;  // guarded by mu_
  std::thread thread_;  // started by the first Submit, under mu_
};

}  // namespace dslaunch::runtime
