// The text of each generated token, for log-probabilities (OpenAI's
// "tokens" and "top_logprobs" keys, the chat form's "token" and "bytes").
//
// Note [The text of one token]
// A token's text is what it adds to the decode of the generated tokens
// before it (a short window of them), found as the text streamer finds its
// pieces (Note [Streaming text and stop strings]): the context is the one
// the response's text is decoded in, so the chosen tokens' texts joined are
// the choice's text (a SentencePiece word-start piece is " a" after another
// token, "a" first, as in the text), and an alternative reads in the same
// context as the chosen token. A token that is only part of a character
// reads as the decoder writes it there (raw bytes, or U+FFFD), as vLLM's
// log-probabilities do; the chat form's "bytes" carry those bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {

class TokenTexts {
 public:
  // `tokenizer` must outlive this.
  explicit TokenTexts(const Tokenizer& tokenizer);

  // The text `token` would add after the tokens pushed so far.
  std::string Text(int64_t token) const;
  // `token` was generated: it joins the context.
  void Push(int64_t token);

 private:
  static constexpr size_t kContext = 4;
  void Decoded();

  const Tokenizer& tokenizer_;
  std::vector<int32_t> context_;  // at most kContext tokens
  std::string context_text_;      // their decode
};

}  // namespace dslaunch::runtime
