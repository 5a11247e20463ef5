// The training samples of instruction fine-tuning, made from an
// InstructionDataset: whole records, padded one per sample or packed.
//
// Note [Instruction sample layout]
// Every sample is sequence_length (L) positions of four int32 arrays:
//   input_ids     the tokens fed to the model;
//   targets       the label of each position, already shifted: position p of
//                 a record predicts the record's token p + 1, whose mask says
//                 whether it is a label; -100 where it is not, and on padding;
//   position_ids  0, 1, 2, ... restarting at 0 where each record starts; 0 on
//                 padding;
//   segment_ids   1, 2, 3, ... for the first, second, third record of the
//                 sample; 0 on padding.
// A record of n tokens fills n - 1 positions: inputs are its tokens 0..n-2,
// targets its tokens 1..n-1 (Note [Long records]); its eos is a target only.
// Attention: position i attends to j exactly when j <= i and segment_ids[i]
// == segment_ids[j] != 0 (causal within a record, never across the records
// packed together). A padding row attends to nothing under that rule; give it
// its own position (j == i) so that softmax has a term: its output is never in
// the loss. Loss: cross entropy over positions with targets != -100 (the
// Hugging Face convention, ignore_index -100).
//
//   packing false  one record per sample, then padding (pad_id);
//   packing true   records in dataset order, packed greedily: a record goes
//                  into the current sample when it fits in what is left, else
//                  it starts the next; a record is never split across samples.
//                  The packing is fixed once by the dataset, not by the epoch.
// Epochs: global sample index g reads epoch g / sample_count at position
// g % sample_count of that epoch's permutation (Note [Portable shuffling]),
// as GptSamples does, so the order is a pure function of (data, seed).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/data/instruction_dataset.h"
#include "runtime/data/instruction_policies.h"

namespace dslaunch::runtime {

inline constexpr int32_t kIgnoreLabel = -100;

struct InstructionSamplesOptions {
  int sequence_length = 0;
  bool packing = false;
  // For records of the dataset longer than sequence_length (a dataset
  // prepared for a longer sequence): Note [Long records].
  LongRecordPolicy on_long_record = LongRecordPolicy::kRefuse;
  // The id on padding positions: the tokenizer's pad, or its eos when it has
  // none (Llama-2). It is never a target and never attended to.
  int32_t pad_id = 0;
  uint64_t seed = 0;
  // The documents used: [first_document, end_document); -1: to the end
  // (DocumentSplit gives train and validation ranges).
  int64_t first_document = 0;
  int64_t end_document = -1;
};

// Where GetSample writes: four arrays of sequence_length entries each.
struct InstructionSampleBuffers {
  int32_t* input_ids = nullptr;
  int32_t* targets = nullptr;
  int32_t* position_ids = nullptr;
  int32_t* segment_ids = nullptr;
};

// Thread-safe.
class InstructionSamples {
 public:
  // `dataset` must outlive the result. Fails on a bad range, a document with
  // fewer than 2 tokens, a long record under policy refuse (naming the
  // document and the dataset), or when no sample remains.
  static absl::StatusOr<std::unique_ptr<InstructionSamples>> Create(const InstructionDataset* dataset,
                                                                    const InstructionSamplesOptions& options);

  int64_t sample_count() const { return static_cast<int64_t>(sample_starts_.size()) - 1; }
  int sequence_length() const { return options_.sequence_length; }
  // Records used (truncated ones included), and the long ones skipped or truncated.
  int64_t record_count() const { return static_cast<int64_t>(documents_.size()); }
  int64_t skipped_long_records() const { return skipped_long_; }
  int64_t truncated_long_records() const { return truncated_long_; }
  // Long records that truncating would leave without a label: skipped.
  int64_t truncated_unlabeled_records() const { return truncated_unlabeled_; }
  // Positions holding a record (not padding), over all samples.
  int64_t filled_positions() const { return filled_positions_; }
  // "1200 records in 340 samples of 512 (packed, 91.2% filled); 3 long records skipped".
  std::string Summary() const;

  // Sample positions in the order epoch `epoch` reads them.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;

  // Writes global sample `global_index` (= epoch * sample_count() + position).
  absl::Status GetSample(int64_t global_index, const InstructionSampleBuffers& out) const;
  // The sample at `position` of the unshuffled order (tests, inspection).
  absl::Status GetSampleAt(int64_t position, const InstructionSampleBuffers& out) const;

 private:
  InstructionSamples(const InstructionDataset* dataset, const InstructionSamplesOptions& options);

  const InstructionDataset* const dataset_;
  const InstructionSamplesOptions options_;
  // The records used, in order, and the tokens each contributes
  // (RecordPositions + 1, or sequence_length + 1 when truncated).
  std::vector<int64_t> documents_;
  std::vector<int64_t> used_tokens_;
  // Sample s holds documents_[sample_starts_[s] .. sample_starts_[s + 1]).
  std::vector<int64_t> sample_starts_;
  int64_t skipped_long_ = 0;
  int64_t truncated_long_ = 0;
  int64_t truncated_unlabeled_ = 0;
  int64_t filled_positions_ = 0;

  // The order of the epoch read last (see GptSamples).
  mutable absl::Mutex mu_;
  mutable int64_t cached_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  mutable std::shared_ptr<const std::vector<int64_t>> cached_order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dslaunch::runtime
