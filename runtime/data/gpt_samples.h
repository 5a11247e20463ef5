// The training samples of a GPT, cut from an indexed dataset's token stream.
//
// Note [Token stream]
// The stream is the dataset's documents concatenated; each document already
// ends with eos (PrepareDataset appends it), so samples cross document
// boundaries freely, as in Megatron/DeepSpeed GPT pretraining.
//
// Sample i of a range [begin, end) is the sequence_length + 1 tokens starting
// at begin + i * sequence_length: inputs are its first sequence_length tokens,
// targets its last sequence_length (the inputs shifted by one). Consecutive
// samples share one token, so every token but the range's last is a target
// exactly once. sample_count = (end - begin - 1) / sequence_length.
//
// Epochs: global sample index g reads epoch g / sample_count at position
// g % sample_count of that epoch's permutation (Note [Portable shuffling]).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/data/indexed_dataset.h"

namespace dslaunch::runtime {

// Thread-safe.
class GptSamples {
 public:
  // `dataset` must outlive the result. Fails when the range holds no whole
  // sample or lies outside the dataset.
  static absl::StatusOr<std::unique_ptr<GptSamples>> Create(const IndexedDataset* dataset,
                                                            TokenRange range, int sequence_length,
                                                            uint64_t seed);
  // The whole dataset.
  static absl::StatusOr<std::unique_ptr<GptSamples>> Create(const IndexedDataset* dataset,
                                                            int sequence_length, uint64_t seed);

  int64_t sample_count() const { return sample_count_; }
  int sequence_length() const { return sequence_length_; }
  int tokens_per_sample() const { return sequence_length_ + 1; }

  // Sample positions in the order epoch `epoch` reads them.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;

  // Writes the tokens_per_sample() tokens of global sample `global_index`
  // (= epoch * sample_count() + position) to `out`.
  absl::Status GetSample(int64_t global_index, int32_t* out) const;

 private:
  GptSamples(const IndexedDataset* dataset, TokenRange range, int sequence_length, uint64_t seed);

  const IndexedDataset* const dataset_;
  const TokenRange range_;
  const int sequence_length_;
  const uint64_t seed_;
  const int64_t sample_count_;

  // The order of the epoch read last: consecutive reads share an epoch, so
  // one cached permutation makes each read O(1).
  mutable absl::Mutex mu_;
  mutable int64_t cached_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  mutable std::shared_ptr<const std::vector<int64_t>> cached_order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dslaunch::runtime
