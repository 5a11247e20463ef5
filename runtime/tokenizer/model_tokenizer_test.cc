#include "runtime/tokenizer/model_tokenizer.h"

#include <string>

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/tokenizer/tiny_tokenizer_json_for_test.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(LoadModelTokenizerTest, FolderPrefersTokenizerJsonAndReadsTheConfig) {
  TestTempDir dir;
  dir.Write("tokenizer.json", kTinyByteLevelJson);
  dir.Write("tokenizer.model", "not a model");  // never read: tokenizer.json wins
  dir.Write("tokenizer_config.json", R"({"eos_token": {"content": "<|eot|>", "lstrip": false}, "chat_template": "x"})");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadModelTokenizer(dir.path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->name(), "hf");
  EXPECT_EQ((*tokenizer)->bos_id(), 18);  // from the template
  EXPECT_EQ((*tokenizer)->eos_id(), 19);  // from tokenizer_config.json
  EXPECT_TRUE((*tokenizer)->adds_bos());
  EXPECT_FALSE((*tokenizer)->adds_eos());
  EXPECT_THAT((*tokenizer)->Encode("Hello world!"), ElementsAre(12, 17, 8));

  dir.Write("tokenizer_config.json", R"({"eos_token": "<|eot|>", "add_bos_token": false, "add_eos_token": true})");
  tokenizer = LoadModelTokenizer(dir.File("tokenizer.json"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_FALSE((*tokenizer)->adds_bos());
  EXPECT_TRUE((*tokenizer)->adds_eos());
}

TEST(LoadModelTokenizerTest, Llama2JsonFindsEosByName) {
  TestTempDir dir;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadModelTokenizer(dir.Write("tokenizer.json", kTinyLlama2Json));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->bos_id(), 1);
  EXPECT_EQ((*tokenizer)->eos_id(), 2);
  EXPECT_EQ((*tokenizer)->TokenId("</s>"), 2);
}

TEST(LoadModelTokenizerTest, RefusalsNameTheFileAndKey) {
  TestTempDir dir;
  const std::string json = dir.Write("tokenizer.json", kTinyByteLevelJson);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadModelTokenizer(json);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("no eos token"));
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("eos_token in " + dir.File("tokenizer_config.json")));

  dir.Write("tokenizer_config.json", R"({"eos_token": "<|eot|>", "add_bos_token": "yes"})");
  tokenizer = LoadModelTokenizer(json);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().message(),
            dir.File("tokenizer_config.json") + ": add_bos_token must be a bool, not a string");

  dir.Write("tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
  tokenizer = LoadModelTokenizer(json);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("eos_token \"<|nope|>\" is not a token of the tokenizer"));

  dir.Write("tokenizer_config.json", R"({"eos_token": )");
  tokenizer = LoadModelTokenizer(json);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr(dir.File("tokenizer_config.json") + ":1:"));

  TestTempDir empty;
  tokenizer = LoadModelTokenizer(empty.path());
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("holds no tokenizer.json or tokenizer.model"));
  tokenizer = LoadModelTokenizer(empty.File("vocab.txt"));
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("no such file or folder"));
  tokenizer = LoadModelTokenizer(empty.Write("vocab.txt", "a"));
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("not a tokenizer file"));
}

TEST(LoadModelTokenizerTest, SentencePieceModelAddsBosUnlessConfigured) {
  TestTempDir dir;
  std::string corpus;
  for (int i = 0; i < 50; ++i) corpus += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  ASSERT_TRUE(TrainSentencePieceBpe({dir.Write("corpus.txt", corpus)}, 400, dir.File("tokenizer")).ok());
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadModelTokenizer(dir.File("tokenizer.model"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->name(), "hf");  // our own reader (sentencepiece_model.h), not libsentencepiece
  EXPECT_TRUE((*tokenizer)->adds_bos());
  EXPECT_EQ((*tokenizer)->TokenId("</s>"), (*tokenizer)->eos_id());
  EXPECT_EQ((*tokenizer)->TokenId("no such piece"), std::nullopt);
  dir.Write("tokenizer_config.json", R"({"add_bos_token": false, "bos_token": "<s>"})");
  tokenizer = LoadModelTokenizer(dir.path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_FALSE((*tokenizer)->adds_bos());
  dir.Write("tokenizer_config.json", R"({"eos_token": "<s>"})");
  tokenizer = LoadModelTokenizer(dir.path());
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("eos_token \"<s>\" is not the eos_token of"));
}

TEST(MakeTokenizerTest, HfKindLoadsAModelTokenizer) {
  TestTempDir dir;
  auto tokenizer = MakeTokenizer("hf", dir.Write("tokenizer.json", kTinyLlama2Json));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->name(), "hf");
  EXPECT_FALSE(MakeTokenizer("hf", "").ok());
}

}  // namespace
}  // namespace dslaunch::runtime
