#include "runtime/tokenizer/hf_tokenizer.h"

#include <string>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/tokenizer/hf_tokenizer_json.h"
#include "runtime/tokenizer/tiny_tokenizer_json_for_test.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::Not;
using ::testing::Contains;

std::unique_ptr<HfTokenizer> Make(const char* json_text) {
  absl::StatusOr<JsonValue> json = ParseJson(json_text, "tokenizer.json");
  EXPECT_TRUE(json.ok()) << json.status();
  absl::StatusOr<HfTokenizerSpec> spec = HfTokenizerSpecFromJson(*json, "tokenizer.json");
  EXPECT_TRUE(spec.ok()) << spec.status();
  HfSequenceTokens sequence;
  sequence.bos_id = spec->template_bos.value_or(-1);
  return std::make_unique<HfTokenizer>(std::move(*spec), sequence);
}

TEST(HfTokenizerTest, ByteLevelPreTokenizesThenMerges) {
  auto tokenizer = Make(kTinyByteLevelJson);
  EXPECT_THAT(tokenizer->Encode("Hello world!"), ElementsAre(12, 17, 8));
  EXPECT_THAT(tokenizer->Encode(""), ElementsAre());
  EXPECT_EQ(tokenizer->vocab_size(), 25);
  EXPECT_EQ(tokenizer->bos_id(), 18);
  EXPECT_EQ(tokenizer->name(), "hf");
}

TEST(HfTokenizerTest, SpecialTokensSplitOutOfTheTextUnlessPlain) {
  auto tokenizer = Make(kTinyByteLevelJson);
  EXPECT_THAT(tokenizer->Encode("<|eot|>Hello<|eot|>"), ElementsAre(19, 12, 19));
  // As text: "<|" "eot" "|>" then Hello; the non-special <x> is still matched.
  EXPECT_THAT(tokenizer->EncodePlainText("<|eot|>Hello<x>"), ElementsAre(21, 22, 1, 3, 24, 22, 23, 12, 20));
  EXPECT_THAT(tokenizer->EncodePlainText("<|eot|>"), Not(Contains(19)));
  EXPECT_EQ(tokenizer->TokenId("<|eot|>"), 19);
  EXPECT_EQ(tokenizer->TokenId("\xC4\xA0world"), 17);  // "Ġworld"
  EXPECT_EQ(tokenizer->TokenId("nope"), std::nullopt);
}

TEST(HfTokenizerTest, ByteLevelDecodeLeavesSpecialTokensOut) {
  auto tokenizer = Make(kTinyByteLevelJson);
  EXPECT_EQ(tokenizer->Decode({18, 12, 17, 8, 19, 20, 999, -1}), "Hello world!<x>");
}

// Ids may leave gaps (a vocabulary with reserved rows); the tokenizer keeps
// no table sized by the largest id (a fuzzer's 999,999,997 once asked for 32 GB).
TEST(HfTokenizerTest, IdsWithGapsEncodeAndDecode) {
  const std::string json = absl::StrReplaceAll(kTinyByteLevelJson, {{R"({"id": 20,)", R"({"id": 16000000,)"}});
  auto tokenizer = Make(json.c_str());
  EXPECT_EQ(tokenizer->vocab_size(), 16000001);
  EXPECT_THAT(tokenizer->Encode("Hello<x>"), ElementsAre(12, 16000000));
  EXPECT_EQ(tokenizer->Decode({12, 20, 16000000, 15999999}), "Hello<x>");
}

TEST(HfTokenizerTest, Llama2NormalizesAndFallsBackToBytes) {
  auto tokenizer = Make(kTinyLlama2Json);
  EXPECT_THAT(tokenizer->Encode("ab ab"), ElementsAre(11, 11));
  EXPECT_THAT(tokenizer->Encode("\xC3\xA9\n"), ElementsAre(6, 4, 5, 3));  // ▁ é(C3 A9) \n
  // ☃ has no byte pieces here: one fused unk for two of them.
  EXPECT_THAT(tokenizer->Encode("a\xE2\x98\x83\xE2\x98\x83"), ElementsAre(9, 0));
  // Each stretch between added tokens gets its own "▁".
  EXPECT_THAT(tokenizer->Encode("<s>ab</s>"), ElementsAre(1, 11, 2));
  EXPECT_EQ(tokenizer->Decode({1, 11, 11, 4, 5, 2}), "ab ab\xC3\xA9");
}

}  // namespace
}  // namespace dslaunch::runtime
