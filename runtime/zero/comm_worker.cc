#include "runtime/zero/comm_worker.h"

namespace dslaunch::runtime {

CommWorker::CommWorker() { thread_ = std::thread([this] { Loop(); }); }

CommWorker::~CommWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

std::shared_future<absl::Status> CommWorker::Submit(std::function<absl::Status()> work) {
  std::promise<absl::Status> done;
  std::shared_future<absl::Status> result = done.get_future().share();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(work), std::move(done));
  }
  changed_.notify_all();
  return result;
}

absl::Status CommWorker::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [this] { return queue_.empty() && !busy_; });
  absl::Status error = first_error_;
  first_error_ = absl::OkStatus();
  return error;
}

void CommWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, nothing left
    auto [work, done] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    absl::Status status;
    try {
      status = work();
    } catch (const std::exception& e) {
      status = absl::InternalError(e.what());
    }
    done.set_value(status);
    lock.lock();
    busy_ = false;
    if (!status.ok() && first_error_.ok()) first_error_ = status;
    changed_.notify_all();
  }
}

}  // namespace dslaunch::runtime
