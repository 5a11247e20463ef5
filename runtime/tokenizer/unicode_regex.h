// A compiled Unicode regular expression (PCRE2) for the Split and ByteLevel
// pre-tokenizers of tokenizer.json.
//
// Note [Pre-tokenizer regex engine]
// Hugging Face's tokenizers compiles pre-tokenizer patterns with Oniguruma;
// the patterns real folders carry (Llama 3's, GPT-2's, Qwen2's) use \p{L},
// \p{N}, \s, (?i:...) and (?!\S), which std::regex cannot express. PCRE2 in
// UTF + UCP mode gives all of them with Unicode semantics (\s is White_Space,
// case-insensitive groups fold Unicode case), and the same leftmost-first
// alternation as Oniguruma, so any such pattern works rather than a fixed
// list of hand-matched ones. Kept exact by the npm reference test
// (tests/tokenizer/). The one known difference: PCRE2 and Oniguruma follow
// their own Unicode versions, so a code point assigned after the older of
// the two may class differently.
// Invalid UTF-8 in the text never matches (PCRE2_MATCH_INVALID_UTF), so it
// ends up in the gaps between matches instead of failing the match.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dslaunch::runtime {

// Immutable after Compile; FindAll is thread-safe.
class UnicodeRegex {
 public:
  // Fails with the pattern and PCRE2's message (and offset) when it does not compile.
  static absl::StatusOr<std::unique_ptr<UnicodeRegex>> Compile(const std::string& pattern);
  ~UnicodeRegex();

  // The [begin, end) byte ranges of the successive non-overlapping matches in
  // `text`, left to right (an empty match advances by one character).
  std::vector<std::pair<size_t, size_t>> FindAll(absl::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  UnicodeRegex(std::string pattern, void* code) : pattern_(std::move(pattern)), code_(code) {}

  const std::string pattern_;
  void* const code_;  // pcre2_code_8*
};

}  // namespace dslaunch::runtime
