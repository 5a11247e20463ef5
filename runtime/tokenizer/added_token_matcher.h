// Finding a tokenizer.json's added tokens (<|begin_of_text|>, <s>, ...) in
// text, as tokenizers does before normalizing: scanning left to right, the
// longest token that starts at a position wins (leftmost-longest), and the
// text between matches is left to the normal pipeline.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "runtime/tokenizer/hf_tokenizer_spec.h"

namespace dslaunch::runtime {

// Immutable; thread-safe.
class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(const std::vector<HfAddedToken>& tokens);

  struct Piece {
    absl::string_view text;  // the token's text, or the text between tokens
    int32_t id;              // the token's id, or -1 for text between tokens
  };
  // Splits `text` into added tokens and the text around them, in order
  // (no empty text pieces). With `include_special` false, special tokens are
  // not matched (their text is ordinary text), only non-special added ones.
  std::vector<Piece> Split(absl::string_view text, bool include_special) const;

 private:
  struct Candidate {
    std::string content;
    int32_t id;
    bool special;
  };
  // By first byte, longest first.
  std::array<std::vector<Candidate>, 256> by_first_byte_;
};

}  // namespace dslaunch::runtime
