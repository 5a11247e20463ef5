// Reading a Hugging Face tokenizer.json into an HfTokenizerSpec, strictly.
//
// Accepted (what Llama 2/3, TinyLlama and Mistral folders carry):
//   model          BPE (vocab, merges as "a b" or ["a", "b"], unk_token,
//                  byte_fallback, fuse_unk, ignore_merges)
//   normalizer     null, Prepend, Replace (string pattern), Sequence of them
//   pre_tokenizer  null, Split (regex or string, behavior Isolated),
//                  ByteLevel, Metaspace, Sequence of them
//   post_processor null, TemplateProcessing (bos/eos around the sequence),
//                  ByteLevel (no effect on ids), Sequence of them
//   decoder        null, ByteLevel, Replace, ByteFallback, Fuse, Strip,
//                  Metaspace, Sequence of them
//   added_tokens   without lstrip/rstrip/single_word
// Anything else (another model type, normalizer, pre-tokenizer, decoder,
// dropout, truncation, an unknown key) is an error naming the file and the
// key: `tokenizer.json: model.type "WordPiece" is not supported (BPE only)`.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/tokenizer/hf_tokenizer_spec.h"
#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {

// A Llama-3 tokenizer.json is 9 MB (17 MB pretty-printed); Qwen's 150K
// vocabulary about 11 MB.
inline constexpr size_t kMaxTokenizerJsonBytes = size_t{256} << 20;

// Reads and checks the file at `path`; errors start with `path`.
absl::StatusOr<HfTokenizerSpec> ReadHfTokenizerJson(const std::string& path);

// The same from parsed JSON; `source` names it in errors.
absl::StatusOr<HfTokenizerSpec> HfTokenizerSpecFromJson(const JsonValue& root, absl::string_view source);

}  // namespace dslaunch::runtime
