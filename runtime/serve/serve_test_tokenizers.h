// For the serving tests: the hand-written tokenizer.json files of
// runtime/tokenizer/tiny_tokenizer_json_for_test.h as tokenizers.
#pragma once

#include <memory>

#include "gtest/gtest.h"
#include "runtime/tokenizer/hf_tokenizer.h"
#include "runtime/tokenizer/hf_tokenizer_json.h"
#include "runtime/tokenizer/json_value.h"
#include "runtime/tokenizer/tiny_tokenizer_json_for_test.h"

namespace dslaunch::runtime {

inline std::unique_ptr<HfTokenizer> TinyTokenizer(const char* json_text, int32_t eos_id = -1) {
  absl::StatusOr<JsonValue> json = ParseJson(json_text, "tokenizer.json");
  EXPECT_TRUE(json.ok()) << json.status();
  absl::StatusOr<HfTokenizerSpec> spec = HfTokenizerSpecFromJson(*json, "tokenizer.json");
  EXPECT_TRUE(spec.ok()) << spec.status();
  HfSequenceTokens sequence;
  sequence.bos_id = spec->template_bos.value_or(-1);
  sequence.eos_id = eos_id;
  return std::make_unique<HfTokenizer>(std::move(*spec), sequence);
}

}  // namespace dslaunch::runtime
