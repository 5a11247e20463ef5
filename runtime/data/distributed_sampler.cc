#include "runtime/data/distributed_sampler.h"

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

absl::StatusOr<DistributedSampler> DistributedSampler::Create(int dp_rank, int dp_size,
                                                              int micro_batch, int accumulation) {
  if (dp_size <= 0 || micro_batch <= 0 || accumulation <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data-parallel size (", dp_size, "), micro batch (", micro_batch,
        ") and gradient accumulation (", accumulation, ") must all be positive"));
  }
  if (dp_rank < 0 || dp_rank >= dp_size) {
    return absl::InvalidArgumentError(absl::StrCat("data-parallel rank ", dp_rank,
                                                   " is outside [0, ", dp_size, ")"));
  }
  return DistributedSampler(dp_rank, dp_size, micro_batch, accumulation);
}

DistributedSampler::DistributedSampler(int dp_rank, int dp_size, int micro_batch,
                                       int accumulation)
    : dp_rank_(dp_rank), dp_size_(dp_size), micro_batch_(micro_batch), accumulation_(accumulation) {}

std::vector<int64_t> DistributedSampler::MicroBatchIndices(int64_t consumed_samples,
                                                           int micro_step) const {
  const int64_t first = consumed_samples + int64_t{micro_step} * micro_batch_ * dp_size_ +
                        int64_t{dp_rank_} * micro_batch_;
  std::vector<int64_t> indices(static_cast<size_t>(micro_batch_));
  for (int j = 0; j < micro_batch_; ++j) indices[j] = first + j;
  return indices;
}

}  // namespace dslaunch::runtime
