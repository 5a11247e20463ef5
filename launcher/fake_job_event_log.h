// A JobEventLog for tests: keeps every event in memory and lets a test wait
// (bounded) for one to appear. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "launcher/job_event_log.h"

namespace dslaunch {

class FakeJobEventLog final : public JobEventLog {
 public:
  void Append(const JobEvent& event) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(event);
    }
    cv_.notify_all();
  }

  std::vector<JobEvent> events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

  // Every event called `name`, in order.
  std::vector<JobEvent> Named(const std::string& name) const {
    std::vector<JobEvent> named;
    for (const JobEvent& event : events()) {
      if (event.name() == name) named.push_back(event);
    }
    return named;
  }

  // Waits until an event called `name` has been appended; nullopt on timeout.
  std::optional<JobEvent> WaitFor(const std::string& name, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<JobEvent> found;
    cv_.wait_for(lock, timeout, [&] {
      for (const JobEvent& event : events_) {
        if (event.name() == name) {
          found = event;
          return true;
        }
      }
      return false;
    });
    return found;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<JobEvent> events_;  // guarded by mu_
};

}  // namespace dslaunch
