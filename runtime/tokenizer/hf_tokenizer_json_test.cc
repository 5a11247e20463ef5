#include "runtime/tokenizer/hf_tokenizer_json.h"

#include <string>

#include "absl/strings/str_replace.h"
#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/tokenizer/tiny_tokenizer_json_for_test.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

absl::StatusOr<HfTokenizerSpec> Read(const std::string& text) {
  absl::StatusOr<JsonValue> json = ParseJson(text, "tokenizer.json");
  if (!json.ok()) return json.status();
  return HfTokenizerSpecFromJson(*json, "tokenizer.json");
}

TEST(HfTokenizerJsonTest, ReadsBothLlamaShapes) {
  absl::StatusOr<HfTokenizerSpec> byte_level = Read(kTinyByteLevelJson);
  ASSERT_TRUE(byte_level.ok()) << byte_level.status();
  EXPECT_EQ(byte_level->pre_tokenizer.size(), 2u);
  EXPECT_EQ(byte_level->template_bos, 18);
  EXPECT_EQ(byte_level->template_eos, std::nullopt);
  EXPECT_EQ(byte_level->added_tokens.size(), 3u);
  EXPECT_EQ(byte_level->vocab_size, 25);
  absl::StatusOr<HfTokenizerSpec> llama2 = Read(kTinyLlama2Json);
  ASSERT_TRUE(llama2.ok()) << llama2.status();
  EXPECT_EQ(llama2->normalizer.size(), 2u);
  EXPECT_EQ(llama2->decoder.size(), 4u);
  EXPECT_EQ(llama2->template_bos, 1);
}

struct Refusal {
  const char* from;     // a fragment of the tiny file
  const char* to;       // what it becomes
  const char* message;  // what the error must say
};

class HfTokenizerJsonRefusalTest : public ::testing::TestWithParam<Refusal> {};

TEST_P(HfTokenizerJsonRefusalTest, NamesTheKey) {
  const Refusal& refusal = GetParam();
  std::string text = kTinyByteLevelJson;
  ASSERT_NE(text.find(refusal.from), std::string::npos) << refusal.from;
  text.replace(text.find(refusal.from), std::string(refusal.from).size(), refusal.to);
  absl::StatusOr<HfTokenizerSpec> spec = Read(text);
  ASSERT_FALSE(spec.ok()) << refusal.to;
  EXPECT_THAT(std::string(spec.status().message()), StartsWith("tokenizer.json: "));
  EXPECT_THAT(spec.status().message(), HasSubstr(refusal.message));
}

INSTANTIATE_TEST_SUITE_P(
    EveryUnsupportedKey, HfTokenizerJsonRefusalTest,
    ::testing::Values(
        Refusal{R"("type": "BPE")", R"("type": "WordPiece")", R"(model.type "WordPiece" is not supported (BPE only))"},
        Refusal{R"("type": "BPE")", R"("type": "Unigram")", R"(model.type "Unigram" is not supported)"},
        Refusal{R"("dropout": null)", R"("dropout": 0.1)", "model.dropout must be null"},
        Refusal{R"("continuing_subword_prefix": null)", R"("continuing_subword_prefix": "##")",
                "model.continuing_subword_prefix must be null"},
        Refusal{R"("byte_fallback": false)", R"("byte_fallback": "no")", "model.byte_fallback must be a bool, not a string"},
        Refusal{R"("byte_fallback": false)", R"("byte_fallback": false, "fancy": 1)", "model.fancy is not supported"},
        Refusal{R"(["H", "e"])", R"("H e x")", "model.merges[0]"},
        Refusal{R"(["H", "e"])", R"(["H", "q"])", "merges[0] (\"H\" + \"q\"): its right token is not in the vocabulary"},
        Refusal{R"("normalizer": null)", R"("normalizer": {"type": "NFKC"})", R"(normalizer.type "NFKC" is not supported)"},
        Refusal{R"("normalizer": null)", R"("normalizer": {"type": "Replace", "pattern": {"Regex": " +"}, "content": " "})",
                "normalizer.pattern.Regex is not supported here"},
        Refusal{R"({"type": "Split")", R"({"type": "Whitespace"}, {"type": "Split")",
                R"(pre_tokenizer.pretokenizers[0].type "Whitespace" is not supported)"},
        Refusal{R"("behavior": "Isolated")", R"("behavior": "Removed")",
                R"(pre_tokenizer.pretokenizers[0].behavior "Removed" is not supported (Isolated only))"},
        Refusal{R"("invert": false)", R"("invert": true)", "pre_tokenizer.pretokenizers[0].invert true is not supported"},
        Refusal{R"({"Regex": "(?i:)", R"({"Regex": "((?i:)", "pre_tokenizer.pretokenizers[0].pattern regex"},
        Refusal{R"("use_regex": false}])", R"("use_regex": false, "prepend": true}])",
                "pre_tokenizer.pretokenizers[1].prepend is not supported"},
        Refusal{R"("decoder": {"type": "ByteLevel")", R"("decoder": {"type": "WordPiece")",
                R"(decoder.type "WordPiece" is not supported)"},
        Refusal{R"("post_processor": {"type": "Sequence")", R"("post_processor": {"type": "BertProcessing")",
                R"(post_processor.type "BertProcessing" is not supported)"},
        Refusal{R"({"Sequence": {"id": "A", "type_id": 0}}])", R"({"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}])",
                "post_processor.processors[1].single[2].Sequence.id must be A, once"},
        Refusal{R"("truncation": null)", R"("truncation": {"max_length": 8})", "truncation must be null"},
        Refusal{R"("padding": null)", R"("padding": {"length": 8})", "padding must be null"},
        Refusal{R"("lstrip": false)", R"("lstrip": true)", "added_tokens[0].lstrip true is not supported"},
        Refusal{R"("single_word": false)", R"("single_word": true)", "added_tokens[0].single_word true is not supported"},
        Refusal{R"("version": "1.0")", R"("version": "1.0", "extra": 1)", "extra is not supported (top-level keys"},
        Refusal{R"("model": {)", R"("model": {"kind": 1, )", "model.kind is not supported"},
        Refusal{R"("H": 0,)", R"("H": 999999997,)", R"(model.vocab["H"] must be an integer in [0, 16777215])"},
        Refusal{R"({"id": 20,)", R"({"id": 16777216,)", "added_tokens[2].id must be an integer in [0, 16777215]"}));

TEST(HfTokenizerJsonTest, Llama2ShapeRefusalsNameTheirKeys) {
  std::string metaspace = absl::StrReplaceAll(
      kTinyLlama2Json, {{R"("pre_tokenizer": null)",
                         R"("pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "sometimes", "split": false})"}});
  absl::StatusOr<HfTokenizerSpec> spec = Read(metaspace);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("pre_tokenizer.prepend_scheme \"sometimes\" is not one of"));
  // A normalized added token cannot be matched in normalized text here.
  std::string normalized = kTinyLlama2Json;
  normalized.replace(normalized.find(R"("normalized": false)"), 19, R"("normalized": true)");
  spec = Read(normalized);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("added_tokens[0].normalized true is not supported with a normalizer"));
  std::string strip = absl::StrReplaceAll(kTinyLlama2Json, {{R"("type": "Strip", "content": " ", "start": 1)",
                                                             R"("type": "Strip", "content": " ", "start": -1)"}});
  spec = Read(strip);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("decoder.decoders[3].start must be an integer"));
  std::string unk = absl::StrReplaceAll(kTinyLlama2Json, {{R"("unk_token": "<unk>")", R"("unk_token": "<oov>")"}});
  spec = Read(unk);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("model.unk_token \"<oov>\" is not in model.vocab"));
}

TEST(HfTokenizerJsonTest, FileErrorsNameTheFile) {
  TestTempDir dir;
  const std::string path = dir.Write("tokenizer.json", "{\"model\": \n [}");
  absl::StatusOr<HfTokenizerSpec> spec = ReadHfTokenizerJson(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), StartsWith(path + ":2:"));
  spec = ReadHfTokenizerJson(dir.File("missing.json"));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("missing.json"));
  const std::string wordpiece = dir.Write("wp.json", absl::StrReplaceAll(kTinyLlama2Json, {{R"("type": "BPE")", R"("type": "WordPiece")"}}));
  spec = ReadHfTokenizerJson(wordpiece);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), wordpiece + ": model.type \"WordPiece\" is not supported (BPE only)");
}

}  // namespace
}  // namespace dslaunch::runtime
