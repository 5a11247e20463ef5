#include "runtime/tokenizer/bpe_model.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dslaunch::runtime {
namespace {

// The byte length of the UTF-8 character starting at text[pos]; an invalid
// byte counts as a character of its own.
size_t CharLength(absl::string_view text, size_t pos) {
  const unsigned char lead = static_cast<unsigned char>(text[pos]);
  size_t length = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  if (pos + length > text.size()) return 1;
  for (size_t i = 1; i < length; ++i) {
    if ((static_cast<unsigned char>(text[pos + i]) & 0xC0) != 0x80) return 1;
  }
  return length;
}

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool alive;
};

struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  // std::priority_queue pops the largest: the lowest rank, then the leftmost.
  bool operator<(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : pos > other.pos;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(
    absl::flat_hash_map<std::string, int32_t> vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
    const std::vector<int32_t>& ranks) {
  if (!ranks.empty() && ranks.size() != merges.size()) {
    return absl::InvalidArgumentError(absl::StrCat(ranks.size(), " ranks for ", merges.size(), " merges"));
  }
  auto model = std::unique_ptr<BpeModel>(new BpeModel(std::move(vocab), options));
  model->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto l = model->vocab_.find(left);
    auto r = model->vocab_.find(right);
    auto merged = model->vocab_.find(absl::StrCat(left, right));
    const char* missing = l == model->vocab_.end() ? "its left token" : r == model->vocab_.end() ? "its right token"
                          : merged == model->vocab_.end() ? "the token it makes" : nullptr;
    if (missing != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("merges[", rank, "] (\"", left, "\" + \"", right, "\"): ",
                                                     missing, " is not in the vocabulary"));
    }
    // A pair listed twice keeps its first (lowest) rank, as tokenizers does.
    model->merges_.try_emplace(PairKey(l->second, r->second),
                               Merge{ranks.empty() ? static_cast<int32_t>(rank) : ranks[rank], merged->second});
  }
  model->byte_fallback_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    auto it = model->vocab_.find(absl::StrFormat("<0x%02X>", b));
    if (it != model->vocab_.end()) model->byte_fallback_ids_[b] = it->second;
  }
  return model;
}

std::optional<int32_t> BpeModel::TokenToId(absl::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    absl::MutexLock lock(&cache_mutex_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> merged = MergeWord(word);
  ids->insert(ids->end(), merged.begin(), merged.end());
  if (cacheable) {
    absl::MutexLock lock(&cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.try_emplace(std::string(word), std::move(merged));
  }
}

std::vector<int32_t> BpeModel::MergeWord(absl::string_view word) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    const int32_t pos = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, pos - 1, -1, true});
    if (pos > 0) symbols[pos - 1].next = pos;
  };
  // The unk token waiting to be added (fuse_unk grows one over a run).
  bool unk_pending = false;
  for (size_t pos = 0; pos < word.size();) {
    const size_t length = CharLength(word, pos);
    const absl::string_view ch = word.substr(pos, length);
    pos += length;
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (unk_pending) add(*options_.unk_id);
      unk_pending = false;
      add(it->second);
      continue;
    }
    if (options_.byte_fallback) {
      bool all_bytes_known = true;
      for (char b : ch) all_bytes_known = all_bytes_known && byte_fallback_ids_[static_cast<uint8_t>(b)] >= 0;
      if (all_bytes_known) {
        for (char b : ch) add(byte_fallback_ids_[static_cast<uint8_t>(b)]);
        continue;
      }
    }
    if (options_.unk_id.has_value()) {
      if (unk_pending && !options_.fuse_unk) add(*options_.unk_id);
      unk_pending = true;
    }
  }
  if (unk_pending) add(*options_.unk_id);

  std::priority_queue<Candidate> queue;
  auto consider = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    auto it = merges_.find(PairKey(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) queue.push(Candidate{it->second.rank, pos, it->second.new_id});
  };
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) consider(pos);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto it = merges_.find(PairKey(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  std::vector<int32_t> ids;
  for (int32_t pos = symbols.empty() ? -1 : 0; pos >= 0; pos = symbols[pos].next) ids.push_back(symbols[pos].id);
  return ids;
}

}  // namespace dslaunch::runtime
