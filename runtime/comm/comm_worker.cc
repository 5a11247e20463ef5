#include "runtime/comm/comm_worker.h"

namespace dslaunch::runtime {

absl::Status CommTicket::Wait() const {
  absl::Status status = status_.get();
  if (done_) done_->BlockCurrentStream();
  return status;
}

CommWorker::CommWorker(torch::Device device) : device_(device) {}

CommWorker::~CommWorker() {
  std::deque<Task> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // Nobody waits for what has not started: after an error the peers may
    // never join those collectives, and running them would hang the exit.
    dropped.swap(queue_);
  }
  for (Task& task : dropped) task.done.set_value(absl::CancelledError("comm worker shut down"));
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Memory the side stream may still be writing goes back to the pools of
  // the destroying thread's stream: that stream waits for the side stream.
  if (last_finished_) last_finished_->BlockCurrentStream();
}

CommTicket CommWorker::Submit(std::function<absl::Status()> work) {
  Task task;
  task.work = std::move(work);
  task.submitted = compat::StreamPoint::OnCurrentStream(device_);
  task.finished = std::make_shared<compat::StreamPoint>();
  CommTicket ticket(task.done.get_future().share(), task.finished);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    // The thread starts with the first task: a worker given work only on
    // the CPU (a tensor group's, which a GPU reduces on a side stream
    // instead) keeps no idle thread on a GPU.
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  }
  changed_.notify_all();
  return ticket;
}

absl::Status CommWorker::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [this] { return queue_.empty() && !busy_; });
  absl::Status error = first_error_;
  first_error_ = absl::OkStatus();
  // The side stream runs its work in order: its last task's end covers all.
  if (last_finished_) last_finished_->BlockCurrentStream();
  return error;
}

void CommWorker::Loop() {
  compat::UseSideStreamOnThisThread(device_);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, nothing left
    Task task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    absl::Status status;
    try {
      task.submitted.BlockCurrentStream();
      status = task.work();
    } catch (const std::exception& e) {
      status = absl::InternalError(e.what());
    }
    *task.finished = compat::StreamPoint::OnCurrentStream(device_);
    task.done.set_value(status);
    lock.lock();
    last_finished_ = task.finished;
    busy_ = false;
    if (!status.ok() && first_error_.ok()) first_error_ = status;
    changed_.notify_all();
  }
}

}  // namespace dslaunch::runtime
