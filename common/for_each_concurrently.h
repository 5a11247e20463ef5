// Runs fn(0) .. fn(count - 1) on up to `max_in_flight` threads at once and
// returns when every call has returned: the controller's fan-out to its
// agents (Describe, opening Watch streams), so that a thousand agents take
// the time of a few dozen round trips, not a thousand. `fn` must be safe to
// call from several threads for distinct indices.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace dslaunch {

inline constexpr size_t kAgentCallsInFlight = 64;

template <class Fn>
void ForEachConcurrently(size_t count, size_t max_in_flight, Fn fn) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  const size_t threads = std::min(count, std::max<size_t>(1, max_in_flight));
  for (size_t i = 0; i < threads; ++i) {
    workers.emplace_back([&] {
      for (size_t at = next++; at < count; at = next++) fn(at);
    });
  }
  for (auto& worker : workers) worker.join();
}

}  // namespace dslaunch
