// The text stages of a Hugging Face tokenizer around its BPE model:
// normalizer and pre-tokenizer before it, decoder after it. Each follows
// tokenizers' own component of the same name (see hf_tokenizer_spec.h).
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "runtime/tokenizer/hf_tokenizer_spec.h"

namespace dslaunch::runtime {

// Runs the normalizer steps on one stretch of text (the text between two
// added tokens). Prepend leaves an empty text empty, as tokenizers does.
std::string Normalize(const std::vector<HfNormalizerStep>& steps, absl::string_view text);

// Splits one normalized stretch into the words the model encodes.
// `at_text_start`: the stretch begins the whole input (Metaspace's
// prepend_scheme "first" prepends only then).
std::vector<std::string> PreTokenize(const std::vector<HfPreTokenizerStep>& steps, std::string text,
                                     bool at_text_start);

// Turns token strings back into text through the decoder steps. With no
// steps the tokens are concatenated. ByteLevel and ByteFallback may leave
// bytes that are not UTF-8 (ids that cut a character): they are returned as
// they are, so that decoding a sequence piece by piece gives its text.
std::string DecodeTokens(const std::vector<HfDecoderStep>& steps, std::vector<std::string> tokens);

}  // namespace dslaunch::runtime
