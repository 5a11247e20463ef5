// A small persistent pool that splits an index range [0, n) into contiguous
// pieces and runs them in parallel, the calling thread taking the first piece.
// Built for memory-bound element-wise kernels (CPU Adam): one fork/join per
// call, no task queue, no work stealing.
#pragma once

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace dslaunch::kernels {

// Thread-safe: concurrent ParallelFor calls take turns (a call holds the whole
// pool until its pieces are done).
class RangeThreadPool {
 public:
  // Runs pieces on `num_threads` threads in all: the caller plus
  // num_threads - 1 workers started here. REQUIRES: num_threads >= 1.
  explicit RangeThreadPool(int num_threads);
  // Stops and joins the workers. REQUIRES: no ParallelFor in progress.
  ~RangeThreadPool();

  RangeThreadPool(const RangeThreadPool&) = delete;
  RangeThreadPool& operator=(const RangeThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint pieces covering [0, n) and returns when
  // all have returned. At most num_threads() pieces, each non-empty and of at
  // least `min_piece` elements except the last; every boundary but n is a
  // multiple of `align` (SIMD pieces stay vector-aligned relative to the
  // start). A single piece runs inline on the caller. `fn` must not call
  // ParallelFor on the same pool.
  void ParallelFor(int64_t n, int64_t min_piece, int64_t align,
                   absl::FunctionRef<void(int64_t, int64_t)> fn);

 private:
  void WorkerLoop(int worker_index);

  // Held for the whole of one ParallelFor call, so calls take turns.
  absl::Mutex call_mu_;

  absl::Mutex mu_;
  // The current job, published by bumping generation_.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  const absl::FunctionRef<void(int64_t, int64_t)>* job_fn_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<int64_t> piece_bounds_ ABSL_GUARDED_BY(mu_);  // piece i: [b[i], b[i+1])
  int pieces_pending_ ABSL_GUARDED_BY(mu_) = 0;             // worker pieces not yet done
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;

  std::vector<std::thread> workers_;
};

}  // namespace dslaunch::kernels
