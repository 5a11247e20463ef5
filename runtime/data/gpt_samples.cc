#include "runtime/data/gpt_samples.h"

#include "absl/strings/str_cat.h"
#include "runtime/data/sample_permutation.h"

namespace dslaunch::runtime {

absl::StatusOr<std::unique_ptr<GptSamples>> GptSamples::Create(const IndexedDataset* dataset,
                                                               TokenRange range,
                                                               int sequence_length,
                                                               uint64_t seed) {
  if (sequence_length <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence_length must be positive, got ", sequence_length));
  }
  if (range.begin < 0 || range.begin > range.end || range.end > dataset->num_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat("token range [", range.begin, ", ", range.end,
                                                   ") is outside the dataset's ",
                                                   dataset->num_tokens(), " tokens"));
  }
  if (range.size() < int64_t{sequence_length} + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data has ", range.size(), " tokens; one sample of sequence_length ",
        sequence_length, " needs ", int64_t{sequence_length} + 1));
  }
  return std::unique_ptr<GptSamples>(new GptSamples(dataset, range, sequence_length, seed));
}

absl::StatusOr<std::unique_ptr<GptSamples>> GptSamples::Create(const IndexedDataset* dataset,
                                                               int sequence_length,
                                                               uint64_t seed) {
  return Create(dataset, TokenRange{0, dataset->num_tokens()}, sequence_length, seed);
}

GptSamples::GptSamples(const IndexedDataset* dataset, TokenRange range, int sequence_length,
                       uint64_t seed)
    : dataset_(dataset),
      range_(range),
      sequence_length_(sequence_length),
      seed_(seed),
      sample_count_((range.size() - 1) / sequence_length) {}

std::vector<int64_t> GptSamples::EpochOrder(int64_t epoch) const {
  return EpochPermutation(sample_count_, seed_, epoch);
}

absl::Status GptSamples::GetSample(int64_t global_index, int32_t* out) const {
  if (global_index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample index must not be negative, got ", global_index));
  }
  const int64_t epoch = global_index / sample_count_;
  const int64_t position = global_index % sample_count_;
  std::shared_ptr<const std::vector<int64_t>> order;
  {
    absl::MutexLock lock(&mu_);
    if (cached_epoch_ != epoch) {
      cached_order_ = std::make_shared<const std::vector<int64_t>>(EpochOrder(epoch));
      cached_epoch_ = epoch;
    }
    order = cached_order_;
  }
  const int64_t sample = (*order)[position];
  return dataset_->CopyTokens(range_.begin + sample * sequence_length_, tokens_per_sample(), out);
}

}  // namespace dslaunch::runtime
