#include "runtime/tokenizer/added_token_matcher.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace dslaunch::runtime {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<HfAddedToken>& tokens) {
  for (const HfAddedToken& token : tokens) {
    if (token.content.empty()) continue;
    by_first_byte_[static_cast<uint8_t>(token.content[0])].push_back({token.content, token.id, token.special});
  }
  for (auto& candidates : by_first_byte_) {
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) { return a.content.size() > b.content.size(); });
  }
}

std::vector<AddedTokenMatcher::Piece> AddedTokenMatcher::Split(absl::string_view text, bool include_special) const {
  std::vector<Piece> pieces;
  size_t text_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const Candidate* match = nullptr;
    for (const Candidate& candidate : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      if ((include_special || !candidate.special) && absl::StartsWith(text.substr(pos), candidate.content)) {
        match = &candidate;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    if (pos > text_start) pieces.push_back({text.substr(text_start, pos - text_start), -1});
    pieces.push_back({text.substr(pos, match->content.size()), match->id});
    pos += match->content.size();
    text_start = pos;
  }
  if (text_start < text.size()) pieces.push_back({text.substr(text_start), -1});
  return pieces;
}

}  // namespace dslaunch::runtime
