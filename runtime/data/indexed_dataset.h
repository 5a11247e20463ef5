// A tokenized corpus on disk (Note [Indexed dataset layout]): written once by
// IndexedDatasetWriter, then memory-mapped by every rank with IndexedDataset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/data/indexed_dataset_format.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

// A half-open range [begin, end) of positions in the token stream.
struct TokenRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Writes `<prefix>.bin` and `<prefix>.idx` so that a crash at any moment
// leaves either the previous dataset, or none, never a partial one that opens:
// tokens go to `<prefix>.bin.tmp` and offsets to `<prefix>.idx.tmp`; Finish()
// fsyncs both, removes the old `.idx`, renames `.bin` then `.idx` into place
// and fsyncs the directory. A writer destroyed before Finish() removes its
// temporary files. Every file operation goes through `fs`, which must outlive
// the writer. Thread-compatible.
class IndexedDatasetWriter {
 public:
  static absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> Create(const std::string& prefix,
                                                                      int64_t vocab_size,
                                                                      FileSystem& fs = FileSystem::Default());
  ~IndexedDatasetWriter();

  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one document, stored verbatim (the caller appends eos). Every id
  // must be in [0, vocab_size).
  absl::Status AddDocument(absl::Span<const int32_t> tokens);
  // Commits the dataset. REQUIRES: called once; no AddDocument afterwards.
  absl::Status Finish();

  int64_t num_documents() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  int64_t num_tokens() const { return offsets_.back(); }

 private:
  IndexedDatasetWriter(FileSystem& fs, std::string prefix, int64_t vocab_size, std::unique_ptr<WritableFile> bin);

  FileSystem& fs_;

  const std::string prefix_;
  const int64_t vocab_size_;
  const uint32_t token_bytes_;
  std::unique_ptr<WritableFile> bin_;
  std::vector<int64_t> offsets_ = {0};
  std::string encoded_;  // scratch for one document's bytes
  bool finished_ = false;
};

// A committed dataset, memory-mapped. Immutable after Open, so every method
// is thread-safe.
class IndexedDataset {
 public:
  // Maps `<prefix>.idx` and `<prefix>.bin` and checks that they agree. Errors
  // name the file and what is wrong with it.
  static absl::StatusOr<std::unique_ptr<IndexedDataset>> Open(const std::string& prefix,
                                                              FileSystem& fs = FileSystem::Default());
  // True when `<prefix>.idx`, the commit record, exists (it may still be corrupt).
  static bool Exists(const std::string& prefix, FileSystem& fs = FileSystem::Default());
  ~IndexedDataset();

  int64_t num_documents() const { return header_.document_count; }
  int64_t num_tokens() const { return header_.token_count; }
  int64_t vocab_size() const { return header_.vocab_size; }
  int token_bytes() const { return static_cast<int>(header_.token_bytes); }

  // The tokens of documents [first, end). REQUIRES: 0 <= first <= end <= num_documents().
  TokenRange DocumentTokens(int64_t first, int64_t end) const {
    return TokenRange{offsets_[first], offsets_[end]};
  }

  // Copies tokens [offset, offset + count) of the concatenated stream to
  // `out`. OutOfRange when the range leaves the stream.
  absl::Status CopyTokens(int64_t offset, int64_t count, int32_t* out) const;

 private:
  IndexedDataset(std::unique_ptr<ReadOnlyMemoryRegion> idx, std::unique_ptr<ReadOnlyMemoryRegion> bin,
                 IndexHeader header, const int64_t* offsets);

  std::unique_ptr<ReadOnlyMemoryRegion> idx_;
  std::unique_ptr<ReadOnlyMemoryRegion> bin_;
  IndexHeader header_;
  const int64_t* offsets_;  // inside idx_, num_documents() + 1 entries
};

}  // namespace dslaunch::runtime
