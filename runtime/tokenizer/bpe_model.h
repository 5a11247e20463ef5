// The BPE model of Hugging Face's tokenizers ("model": {"type": "BPE"}):
// a word (one pre-token) becomes ids by starting from its characters and
// applying merges, lowest rank first.
//
// Exact to tokenizers' BPE (model.rs/word.rs), as the reference test checks:
//  - a character missing from the vocabulary becomes, with byte_fallback,
//    the pieces <0x41>... of its UTF-8 bytes (when all of them exist), else
//    the unk token (consecutive ones fused into one with fuse_unk), else
//    nothing (tokenizers drops it too when there is no unk token);
//  - merges apply in rank order, equal ranks left to right; a pair counts
//    only while both its symbols are still there;
//  - with ignore_merges (Llama 3), a word that is itself in the vocabulary
//    is that one id, whatever the merges would make of it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace dslaunch::runtime {

struct BpeOptions {
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

// Thread-safe: immutable but for a word cache behind a mutex.
class BpeModel {
 public:
  // `merges` in rank order (rank = index), or with `ranks` (one per merge)
  // each merge's rank, several merges sharing one (SentencePiece: every
  // split of a piece has the piece's rank; sentencepiece_model.h). Fails,
  // naming the merge's index, when a merge names a token that is not in
  // `vocab` or makes one that is not.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(
      absl::flat_hash_map<std::string, int32_t> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
      const std::vector<int32_t>& ranks = {});

  // Appends the ids of `word` to `ids`.
  void EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(absl::string_view token) const;
  const absl::flat_hash_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  BpeModel(absl::flat_hash_map<std::string, int32_t> vocab, BpeOptions options)
      : vocab_(std::move(vocab)), options_(options) {}

  std::vector<int32_t> MergeWord(absl::string_view word) const;

  // Words at most this long are cached, at most this many of them
  // (tokenizers' own bounds: 256 characters, 10,000 words).
  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kCacheCapacity = 10000;

  const absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::vector<int32_t> byte_fallback_ids_;  // <0x00>..<0xFF>, -1 where missing
  const BpeOptions options_;

  mutable absl::Mutex cache_mutex_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_ ABSL_GUARDED_BY(cache_mutex_);
};

}  // namespace dslaunch::runtime
