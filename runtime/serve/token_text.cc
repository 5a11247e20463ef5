#include "runtime/serve/token_text.h"

#include <algorithm>

namespace dslaunch::runtime {

TokenTexts::TokenTexts(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

std::string TokenTexts::Text(int64_t token) const {
  std::vector<int32_t> window = context_;
  window.push_back(static_cast<int32_t>(token));
  const std::string text = tokenizer_.Decode(window);
  // A decoder is a left-to-right function of its pieces: the window's text
  // begins with the context's, except where the context ended inside a
  // character, which the new token may complete.
  size_t common = 0;
  const size_t limit = std::min(text.size(), context_text_.size());
  while (common < limit && text[common] == context_text_[common]) ++common;
  return text.substr(common);
}

void TokenTexts::Push(int64_t token) {
  context_.push_back(static_cast<int32_t>(token));
  if (context_.size() > kContext) context_.erase(context_.begin());
  Decoded();
}

void TokenTexts::Decoded() { context_text_ = tokenizer_.Decode(context_); }

}  // namespace dslaunch::runtime
