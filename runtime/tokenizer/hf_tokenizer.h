// A Hugging Face tokenizer.json as a Tokenizer: added tokens split out of
// the text, then per stretch the normalizer, the pre-tokenizer and the BPE
// model (hf_tokenizer_json.h lists what is supported). Exact to Hugging
// Face's tokenizers on Llama 2/3 vocabularies (tests/tokenizer/).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "runtime/tokenizer/added_token_matcher.h"
#include "runtime/tokenizer/hf_tokenizer_spec.h"
#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {

// Which ids frame a sequence (LoadModelTokenizer settles them from
// tokenizer.json's template and tokenizer_config.json).
struct HfSequenceTokens {
  int32_t bos_id = -1;  // -1: none
  int32_t eos_id = -1;
  bool adds_bos = false;
  bool adds_eos = false;
};

// Immutable but for the BPE model's word cache; thread-safe.
class HfTokenizer : public Tokenizer {
 public:
  HfTokenizer(HfTokenizerSpec spec, HfSequenceTokens sequence_tokens);

  std::vector<int32_t> Encode(absl::string_view text) const override;
  std::vector<int32_t> EncodePlainText(absl::string_view text) const override;
  // Through the tokenizer.json's decoder; special added tokens are left out.
  std::string Decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override { return spec_.vocab_size; }
  int32_t eos_id() const override { return sequence_tokens_.eos_id; }
  int32_t bos_id() const override { return sequence_tokens_.bos_id; }
  bool adds_bos() const override { return sequence_tokens_.adds_bos; }
  bool adds_eos() const override { return sequence_tokens_.adds_eos; }
  std::optional<int32_t> TokenId(absl::string_view token) const override;
  std::string name() const override { return "hf"; }

  const HfTokenizerSpec& spec() const { return spec_; }

 private:
  std::vector<int32_t> EncodeWithAddedTokens(absl::string_view text, bool match_special) const;

  const HfTokenizerSpec spec_;
  const HfSequenceTokens sequence_tokens_;
  const AddedTokenMatcher added_tokens_;
  absl::flat_hash_map<int32_t, std::string> id_to_token_;  // ids may leave gaps
  absl::flat_hash_set<int32_t> special_ids_;
  absl::flat_hash_map<std::string, int32_t> added_token_ids_;
};

}  // namespace dslaunch::runtime
