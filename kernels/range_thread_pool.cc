#include "kernels/range_thread_pool.h"

#include <algorithm>

namespace dslaunch::kernels {

RangeThreadPool::RangeThreadPool(int num_threads) {
  const int workers = std::max(num_threads, 1) - 1;
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) {
    // Worker i runs piece i + 1; the caller runs piece 0.
    workers_.emplace_back([this, i] { WorkerLoop(i + 1); });
  }
}

RangeThreadPool::~RangeThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
}

void RangeThreadPool::ParallelFor(int64_t n, int64_t min_piece, int64_t align,
                                  absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  align = std::max<int64_t>(align, 1);
  min_piece = std::max<int64_t>(min_piece, 1);
  // As many equal pieces as threads allow while each keeps min_piece
  // elements, rounded up to `align`; the last one takes the remainder (the
  // rounding can leave fewer pieces than planned).
  const int64_t planned = std::min<int64_t>(std::max<int64_t>(n / min_piece, 1), num_threads());
  const int64_t per_piece = ((n + planned - 1) / planned + align - 1) / align * align;
  const int pieces = static_cast<int>((n + per_piece - 1) / per_piece);
  if (pieces == 1) {
    fn(0, n);
    return;
  }

  absl::MutexLock call_lock(&call_mu_);
  std::vector<int64_t> bounds(pieces + 1);
  for (int i = 0; i <= pieces; ++i) bounds[i] = std::min<int64_t>(per_piece * i, n);
  {
    absl::MutexLock lock(&mu_);
    piece_bounds_ = bounds;
    job_fn_ = &fn;
    pieces_pending_ = pieces - 1;
    ++generation_;
  }
  fn(bounds[0], bounds[1]);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* pending) { return *pending == 0; }, &pieces_pending_));
  job_fn_ = nullptr;
}

void RangeThreadPool::WorkerLoop(int worker_index) {
  uint64_t seen_generation = 0;
  absl::MutexLock lock(&mu_);
  while (true) {
    auto has_news = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return shutting_down_ || generation_ != seen_generation;
    };
    mu_.Await(absl::Condition(&has_news));
    if (shutting_down_) return;
    seen_generation = generation_;
    // A call with fewer pieces than threads leaves this worker idle.
    if (worker_index + 1 >= static_cast<int>(piece_bounds_.size())) continue;
    const int64_t begin = piece_bounds_[worker_index];
    const int64_t end = piece_bounds_[worker_index + 1];
    const auto* fn = job_fn_;
    mu_.Unlock();
    (*fn)(begin, end);
    mu_.Lock();
    --pieces_pending_;
  }
}

}  // namespace dslaunch::kernels
