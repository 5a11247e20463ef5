// Tokenized instruction records on disk: an indexed dataset of tokens and a
// second one, of the same document lengths, holding each token's loss mask.
//
// Note [Instruction dataset layout]
// A dataset with prefix P is two indexed datasets (Note [Indexed dataset
// layout]):
//   P.bin, P.idx                      the tokens of each record: [bos] prompt
//                                     response eos, one document per record;
//   P.loss_mask.bin, P.loss_mask.idx  vocab_size 2, one value per token:
//                                     1 where the token is a label, 0 where
//                                     its label is -100.
// A mask rather than labels because labels hold -100, which an indexed
// dataset (ids in [0, vocab_size)) cannot; label = mask ? token : -100.
// P.idx is the commit record of the pair: the writer removes it (durably)
// before committing the mask, then commits the mask, then the tokens. A crash
// at any moment leaves either a complete pair or no P.idx, never tokens
// beside a mask of another preparation. Opening checks that the two agree
// (document count, token count, every document's length).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/data/indexed_dataset.h"
#include "runtime/data/instruction_encoding.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

// "<prefix>.loss_mask": the prefix of the mask dataset.
std::string LossMaskPrefix(const std::string& prefix);

// Writes the pair atomically (Note [Instruction dataset layout]). A writer
// destroyed before Finish() removes its temporary files and leaves any
// earlier dataset as it was. `fs` must outlive the writer. Thread-compatible.
class InstructionDatasetWriter {
 public:
  static absl::StatusOr<std::unique_ptr<InstructionDatasetWriter>> Create(
      const std::string& prefix, int64_t vocab_size, FileSystem& fs = FileSystem::Default());

  // REQUIRES: record.tokens.size() == record.loss_mask.size().
  absl::Status AddRecord(const EncodedRecord& record);
  // Commits the pair. REQUIRES: called once; no AddRecord afterwards.
  absl::Status Finish();

  int64_t num_documents() const { return tokens_->num_documents(); }
  int64_t num_tokens() const { return tokens_->num_tokens(); }
  int64_t num_label_tokens() const { return label_tokens_; }

 private:
  InstructionDatasetWriter(FileSystem& fs, std::string prefix, std::unique_ptr<IndexedDatasetWriter> tokens,
                           std::unique_ptr<IndexedDatasetWriter> mask);

  FileSystem& fs_;
  const std::string prefix_;
  std::unique_ptr<IndexedDatasetWriter> tokens_;
  std::unique_ptr<IndexedDatasetWriter> mask_;
  std::vector<int32_t> mask_ids_;  // scratch
  int64_t label_tokens_ = 0;
};

// A committed pair, memory-mapped. Immutable after Open: thread-safe.
class InstructionDataset {
 public:
  // Opens both datasets and checks that they agree; errors name the files.
  static absl::StatusOr<std::unique_ptr<InstructionDataset>> Open(const std::string& prefix,
                                                                  FileSystem& fs = FileSystem::Default());
  // True when the pair's commit record P.idx and the mask's index exist.
  static bool Exists(const std::string& prefix, FileSystem& fs = FileSystem::Default());

  const std::string& prefix() const { return prefix_; }
  int64_t num_documents() const { return tokens_->num_documents(); }
  int64_t num_tokens() const { return tokens_->num_tokens(); }
  int64_t vocab_size() const { return tokens_->vocab_size(); }
  // REQUIRES: 0 <= document < num_documents().
  int64_t DocumentLength(int64_t document) const { return tokens_->DocumentTokens(document, document + 1).size(); }

  // Copies the first `count` tokens of `document` and their mask values.
  // REQUIRES: 0 <= document < num_documents(), count <= DocumentLength(document).
  absl::Status CopyDocument(int64_t document, int64_t count, int32_t* tokens, int32_t* loss_mask) const;

 private:
  InstructionDataset(std::string prefix, std::unique_ptr<IndexedDataset> tokens, std::unique_ptr<IndexedDataset> mask);

  const std::string prefix_;
  std::unique_ptr<IndexedDataset> tokens_;
  std::unique_ptr<IndexedDataset> mask_;
};

}  // namespace dslaunch::runtime
