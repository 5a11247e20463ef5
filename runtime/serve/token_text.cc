#include "runtime/serve/token_text.h"

namespace dslaunch::runtime {

TokenTexts::TokenTexts(const Tokenizer& tokenizer, const std::vector<int64_t>& context)
    : tokenizer_(tokenizer), tokens_(context) {}

std::string TokenTexts::Text(int64_t token) const {
  return DecodeAfter(tokenizer_, DecodingContext(tokens_), {static_cast<int32_t>(token)});
}

void TokenTexts::Push(int64_t token) { tokens_.push_back(token); }

}  // namespace dslaunch::runtime
