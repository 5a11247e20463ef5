// What a Hugging Face tokenizer.json says, in the parts dslaunch implements
// (hf_tokenizer_json.h reads it; hf_tokenizer.h runs it). Anything else in
// the file is refused when it is read, never ignored.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tokenizer/bpe_model.h"
#include "runtime/tokenizer/unicode_regex.h"

namespace dslaunch::runtime {

// An entry of "added_tokens": matched in the text before anything else.
struct HfAddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
};

// One normalizer step (a Sequence is flattened into its steps).
struct HfNormalizerStep {
  enum class Kind { kPrepend, kReplace };
  Kind kind = Kind::kPrepend;
  std::string pattern;  // kReplace: the literal string replaced
  std::string content;  // kPrepend: what is prepended; kReplace: the replacement
};

// One pre-tokenizer step: turns each piece of text into pieces.
struct HfPreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  enum class PrependScheme { kAlways, kFirst, kNever };
  Kind kind = Kind::kSplit;
  // kSplit: the pattern (behavior Isolated: matches and the text between
  // them are pieces). kByteLevel: GPT-2's pattern when use_regex, else null.
  std::shared_ptr<const UnicodeRegex> regex;
  bool add_prefix_space = false;  // kByteLevel
  std::string replacement;        // kMetaspace ("▁")
  PrependScheme prepend_scheme = PrependScheme::kAlways;  // kMetaspace
  bool split = false;             // kMetaspace: split before each replacement
};

// One decoder step: turns the list of token strings into another.
struct HfDecoderStep {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
  Kind kind = Kind::kFuse;
  std::string pattern;  // kReplace: literal string
  std::string content;  // kReplace: replacement; kStrip: the character stripped; kMetaspace: the replacement
  int start = 0;        // kStrip: how many leading `content` to remove from each token
  int stop = 0;         // kStrip: how many trailing
  HfPreTokenizerStep::PrependScheme prepend_scheme = HfPreTokenizerStep::PrependScheme::kAlways;  // kMetaspace
};

struct HfTokenizerSpec {
  std::vector<HfAddedToken> added_tokens;
  std::vector<HfNormalizerStep> normalizer;
  std::vector<HfPreTokenizerStep> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::vector<HfDecoderStep> decoder;
  // The special tokens post_processor's TemplateProcessing puts before and
  // after a single sequence (Llama: bos before, nothing after).
  std::optional<int32_t> template_bos;
  std::optional<int32_t> template_eos;
  int vocab_size = 0;  // 1 + the largest id of the vocabulary and added tokens
};

// The largest token id a tokenizer.json may use. Ids index the rows of an
// embedding, and the largest published vocabularies hold about 260,000
// tokens; an id past this is a corrupt file, not a vocabulary.
inline constexpr int64_t kMaxHfTokenId = (int64_t{1} << 24) - 1;

}  // namespace dslaunch::runtime
