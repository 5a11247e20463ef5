#include "runtime/tokenizer/hf_tokenizer.h"

#include <utility>

#include "runtime/tokenizer/hf_text_pipeline.h"

namespace dslaunch::runtime {

HfTokenizer::HfTokenizer(HfTokenizerSpec spec, HfSequenceTokens sequence_tokens)
    : spec_(std::move(spec)), sequence_tokens_(sequence_tokens), added_tokens_(spec_.added_tokens) {
  id_to_token_.reserve(spec_.model->vocab().size() + spec_.added_tokens.size());
  for (const auto& [token, id] : spec_.model->vocab()) id_to_token_[id] = token;
  for (const HfAddedToken& token : spec_.added_tokens) {
    id_to_token_[token.id] = token.content;
    added_token_ids_[token.content] = token.id;
    if (token.special) special_ids_.insert(token.id);
  }
}

std::vector<int32_t> HfTokenizer::Encode(absl::string_view text) const {
  return EncodeWithAddedTokens(text, /*match_special=*/true);
}

std::vector<int32_t> HfTokenizer::EncodePlainText(absl::string_view text) const {
  return EncodeWithAddedTokens(text, /*match_special=*/false);
}

std::vector<int32_t> HfTokenizer::EncodeWithAddedTokens(absl::string_view text, bool match_special) const {
  std::vector<int32_t> ids;
  for (const AddedTokenMatcher::Piece& piece : added_tokens_.Split(text, match_special)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    const bool at_text_start = piece.text.data() == text.data();
    for (const std::string& word : PreTokenize(spec_.pre_tokenizer, Normalize(spec_.normalizer, piece.text),
                                               at_text_start)) {
      spec_.model->EncodeWord(word, &ids);
    }
  }
  return ids;
}

std::string HfTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    auto it = id_to_token_.find(id);
    if (it == id_to_token_.end() || special_ids_.contains(id)) continue;
    tokens.push_back(it->second);
  }
  return DecodeTokens(spec_.decoder, std::move(tokens));
}

std::optional<int32_t> HfTokenizer::TokenId(absl::string_view token) const {
  if (auto it = added_token_ids_.find(token); it != added_token_ids_.end()) return it->second;
  return spec_.model->TokenToId(token);
}

}  // namespace dslaunch::runtime
