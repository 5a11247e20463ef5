// The text of each generated token, for log-probabilities (OpenAI's
// "tokens" and "top_logprobs" keys, the chat form's "token" and "bytes").
//
// Note [The text of one token]
// A token's text is what it adds after the tokens before it (a short window
// of them: the prompt's last tokens, then the generated ones; DecodeAfter in
// runtime/tokenizer/tokenizer.h), the context the response's text is
// decoded in (Note [Streaming text and stop strings]), so the chosen
// tokens' texts joined are the choice's text (a SentencePiece word-start
// piece is " a" after another token), and an alternative reads in the same
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
  // `tokenizer` must outlive this; `context`: the tokens before the first
  // (the prompt's; empty: none, where a word-start piece loses its space).
  TokenTexts(const Tokenizer& tokenizer, const std::vector<int64_t>& context);

  // The text `token` would add after the tokens pushed so far.
  std::string Text(int64_t token) const;
  // `token` was generated: it joins the context.
  void Push(int64_t token);

 private:
  const Tokenizer& tokenizer_;
  std::vector<int64_t> tokens_;  // the context, then each token pushed
};

}  // namespace dslaunch::runtime
