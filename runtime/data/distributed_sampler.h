// Which global samples a data-parallel rank reads at each micro-step.
//
// Note [Stateless sampling]
// The sampler keeps no cursor: the engine keeps one counter, consumed_samples
// (saved in checkpoints), and every read is a function of it. A step reads
// the G = micro_batch * accumulation * dp_size global samples
// [consumed, consumed + G); micro-step m of rank r reads
//
//   consumed + m * (micro_batch * dp_size) + r * micro_batch + j,  j in [0, micro_batch)
//
// So one micro-step of all ranks together reads a contiguous block, and a step
// reads the same G samples whatever the split of G into micro_batch, dp_size
// and accumulation (dp=1 micro=8, dp=2 micro=4, dp=4 micro=2 all read
// [consumed, consumed + 8)). Resuming with consumed = steps_done * G, even on
// a different data-parallel size, continues the same global order.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

// Immutable, so thread-safe.
class DistributedSampler {
 public:
  // Checks 0 <= dp_rank < dp_size and positive sizes.
  static absl::StatusOr<DistributedSampler> Create(int dp_rank, int dp_size, int micro_batch,
                                                   int accumulation);
  // REQUIRES: the arguments pass Create's checks.
  DistributedSampler(int dp_rank, int dp_size, int micro_batch, int accumulation);

  // The micro_batch global sample indices this rank reads at `micro_step`
  // (0 <= micro_step < accumulation) of the step that starts at `consumed_samples`.
  std::vector<int64_t> MicroBatchIndices(int64_t consumed_samples, int micro_step) const;

  // Samples one optimizer step consumes over all ranks.
  int64_t global_batch() const {
    return int64_t{micro_batch_} * accumulation_ * dp_size_;
  }

  int dp_rank() const { return dp_rank_; }
  int dp_size() const { return dp_size_; }
  int micro_batch() const { return micro_batch_; }
  int accumulation() const { return accumulation_; }

 private:
  int dp_rank_;
  int dp_size_;
  int micro_batch_;
  int accumulation_;
};

}  // namespace dslaunch::runtime
