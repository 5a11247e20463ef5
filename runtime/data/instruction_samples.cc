#include "runtime/data/instruction_samples.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "runtime/data/sample_permutation.h"

namespace dslaunch::runtime {

absl::StatusOr<std::unique_ptr<InstructionSamples>> InstructionSamples::Create(
    const InstructionDataset* dataset, const InstructionSamplesOptions& options) {
  const int64_t length = options.sequence_length;
  if (length <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("sequence_length must be positive, got ", length));
  }
  const int64_t end = options.end_document < 0 ? dataset->num_documents() : options.end_document;
  if (options.first_document < 0 || options.first_document > end || end > dataset->num_documents()) {
    return absl::InvalidArgumentError(absl::StrCat("documents [", options.first_document, ", ", end,
                                                   ") are outside the dataset ", dataset->prefix(), "'s ",
                                                   dataset->num_documents(), " documents"));
  }
  std::unique_ptr<InstructionSamples> samples(new InstructionSamples(dataset, options));
  for (int64_t d = options.first_document; d < end; ++d) {
    int64_t tokens = dataset->DocumentLength(d);
    if (tokens < 2) {
      return absl::DataLossError(absl::StrCat("instruction dataset ", dataset->prefix(), ": document ", d, " has ",
                                              tokens, " tokens; a record has at least 2 (a response and eos)"));
    }
    if (RecordPositions(tokens) > length) {
      switch (options.on_long_record) {
        case LongRecordPolicy::kRefuse:
          return absl::InvalidArgumentError(absl::StrCat(
              "instruction dataset ", dataset->prefix(), ": document ", d, " has ", tokens,
              " tokens, more than sequence_length ", length, " + 1 (prepared for a longer sequence? prepare it "
              "again, or set data.on_long_record: skip or truncate)"));
        case LongRecordPolicy::kSkip:
          ++samples->skipped_long_;
          continue;
        case LongRecordPolicy::kTruncate: {
          // What is left must hold a label: a response cut off whole would
          // give a row of no targets (a loss of 0/0), so it goes, counted.
          std::vector<int32_t> kept(static_cast<size_t>(length + 1)), mask(static_cast<size_t>(length + 1));
          DS_RETURN_IF_ERROR(dataset->CopyDocument(d, length + 1, kept.data(), mask.data()));
          if (std::none_of(mask.begin() + 1, mask.end(), [](int32_t m) { return m != 0; })) {
            ++samples->truncated_unlabeled_;
            continue;
          }
          ++samples->truncated_long_;
          tokens = length + 1;
          break;
        }
      }
    }
    samples->documents_.push_back(d);
    samples->used_tokens_.push_back(tokens);
  }
  // Greedy packing in order (or one record per sample).
  int64_t filled = 0;
  samples->sample_starts_.push_back(0);
  for (size_t i = 0; i < samples->documents_.size(); ++i) {
    const int64_t positions = RecordPositions(samples->used_tokens_[i]);
    samples->filled_positions_ += positions;
    const bool fits = options.packing && i > 0 && filled + positions <= length;
    if (i > 0 && !fits) {
      samples->sample_starts_.push_back(static_cast<int64_t>(i));
      filled = 0;
    }
    filled += positions;
  }
  samples->sample_starts_.push_back(static_cast<int64_t>(samples->documents_.size()));
  if (samples->documents_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("instruction dataset ", dataset->prefix(), ": no record of documents [",
                                                   options.first_document, ", ", end, ") is usable (",
                                                   samples->skipped_long_ + samples->truncated_unlabeled_,
                                                   " longer than sequence_length ", length, " skipped)"));
  }
  return samples;
}

InstructionSamples::InstructionSamples(const InstructionDataset* dataset, const InstructionSamplesOptions& options)
    : dataset_(dataset), options_(options) {}

std::string InstructionSamples::Summary() const {
  const double fill = 100.0 * static_cast<double>(filled_positions_) /
                      (static_cast<double>(sample_count()) * options_.sequence_length);
  std::string summary = absl::StrFormat("%d records in %d samples of %d (%s, %.1f%% filled)", record_count(),
                                        sample_count(), options_.sequence_length,
                                        options_.packing ? "packed" : "padded", fill);
  if (skipped_long_ > 0) absl::StrAppend(&summary, "; ", skipped_long_, " long records skipped");
  if (truncated_long_ > 0) absl::StrAppend(&summary, "; ", truncated_long_, " long records truncated");
  if (truncated_unlabeled_ > 0) {
    absl::StrAppend(&summary, "; ", truncated_unlabeled_,
                    " long records skipped: truncating them left no response token to learn");
  }
  return summary;
}

std::vector<int64_t> InstructionSamples::EpochOrder(int64_t epoch) const {
  return EpochPermutation(sample_count(), options_.seed, epoch);
}

absl::Status InstructionSamples::GetSample(int64_t global_index, const InstructionSampleBuffers& out) const {
  if (global_index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sample index must not be negative, got ", global_index));
  }
  const int64_t epoch = global_index / sample_count();
  const int64_t position = global_index % sample_count();
  std::shared_ptr<const std::vector<int64_t>> order;
  {
    absl::MutexLock lock(&mu_);
    if (cached_epoch_ != epoch) {
      cached_order_ = std::make_shared<const std::vector<int64_t>>(EpochOrder(epoch));
      cached_epoch_ = epoch;
    }
    order = cached_order_;
  }
  return GetSampleAt((*order)[position], out);
}

absl::Status InstructionSamples::GetSampleAt(int64_t position, const InstructionSampleBuffers& out) const {
  if (position < 0 || position >= sample_count()) {
    return absl::OutOfRangeError(absl::StrCat("sample ", position, " is outside [0, ", sample_count(), ")"));
  }
  const int length = options_.sequence_length;
  std::fill(out.input_ids, out.input_ids + length, options_.pad_id);
  std::fill(out.targets, out.targets + length, kIgnoreLabel);
  std::fill(out.position_ids, out.position_ids + length, 0);
  std::fill(out.segment_ids, out.segment_ids + length, 0);
  std::vector<int32_t> tokens, mask;
  int64_t at = 0;
  int32_t segment = 0;
  for (int64_t i = sample_starts_[position]; i < sample_starts_[position + 1]; ++i) {
    const int64_t count = used_tokens_[i];
    tokens.resize(count);
    mask.resize(count);
    DS_RETURN_IF_ERROR(dataset_->CopyDocument(documents_[i], count, tokens.data(), mask.data()));
    ++segment;
    for (int64_t k = 0; k + 1 < count; ++k, ++at) {
      out.input_ids[at] = tokens[k];
      out.targets[at] = mask[k + 1] != 0 ? tokens[k + 1] : kIgnoreLabel;
      out.position_ids[at] = static_cast<int32_t>(k);
      out.segment_ids[at] = segment;
    }
  }
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
