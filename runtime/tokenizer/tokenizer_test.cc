#include "runtime/tokenizer/tokenizer.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fs/file_system.h"
#include "common/test_temp_dir.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

TEST(ByteTokenizerTest, RoundTripsEveryByte) {
  ByteTokenizer tokenizer;
  std::string text;
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  std::vector<int32_t> ids = tokenizer.Encode(text);
  ASSERT_EQ(ids.size(), 256u);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[255], 255);
  EXPECT_EQ(tokenizer.Decode(ids), text);
  EXPECT_EQ(tokenizer.vocab_size(), 257);
  EXPECT_EQ(tokenizer.eos_id(), 256);
  EXPECT_EQ(tokenizer.bos_id(), -1);
  EXPECT_EQ(tokenizer.name(), "byte");
}

TEST(ByteTokenizerTest, DecodeLeavesOutEos) {
  ByteTokenizer tokenizer;
  EXPECT_EQ(tokenizer.Decode({'h', 'i', ByteTokenizer::kEosId, '!'}), "hi!");
}

// A corpus of few distinct characters, so a vocabulary of ~300 leaves room
// for merges after the 259 special and byte pieces.
std::string SmallCorpus() {
  const char* words[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog",
                         "and", "then", "runs", "back", "home", "to", "sleep"};
  std::string corpus;
  for (int line = 0; line < 200; ++line) {
    for (int w = 0; w < 8; ++w) {
      corpus += words[(line * 7 + w * 3) % 15];
      corpus += w == 7 ? ".\n" : " ";
    }
  }
  return corpus;
}

class SentencePieceTest : public ::testing::Test {
 protected:
  void SetUp() override { corpus_ = dir_.Write("corpus.txt", SmallCorpus()); }

  TestTempDir dir_;
  std::string corpus_;
};

TEST_F(SentencePieceTest, TrainsDeterministicModelThatRoundTrips) {
  ASSERT_TRUE(TrainSentencePieceBpe({corpus_}, 320, dir_.File("a")).ok());
  ASSERT_TRUE(TrainSentencePieceBpe({corpus_}, 320, dir_.File("b")).ok());
  auto a_bytes = FileSystem::Default().ReadFile(dir_.File("a.model"));
  auto b_bytes = FileSystem::Default().ReadFile(dir_.File("b.model"));
  ASSERT_TRUE(a_bytes.ok() && b_bytes.ok());
  EXPECT_EQ(*a_bytes, *b_bytes) << "two trainings on the same corpus gave different models";

  auto tokenizer = SentencePieceTokenizer::Load(dir_.File("a.model"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->name(), "sentencepiece");
  EXPECT_EQ((*tokenizer)->eos_id(), 2);
  EXPECT_EQ((*tokenizer)->bos_id(), 1);
  EXPECT_GT((*tokenizer)->vocab_size(), 259);
  EXPECT_LE((*tokenizer)->vocab_size(), 320);

  // Words of the corpus merge into fewer tokens than bytes.
  std::string seen = "the quick brown fox jumps over the lazy dog.";
  std::vector<int32_t> ids = (*tokenizer)->Encode(seen);
  EXPECT_LT(ids.size(), seen.size() / 2);
  EXPECT_EQ((*tokenizer)->Decode(ids), seen);

  // Unseen characters fall back to bytes: nothing is lost, not even spacing.
  std::string unseen = "  Zebra\tÜnïcode 日本\r\n\nend ";
  EXPECT_EQ((*tokenizer)->Decode((*tokenizer)->Encode(unseen)), unseen);
}

TEST_F(SentencePieceTest, TooSmallVocabularyIsAnErrorNamingIt) {
  absl::Status status = TrainSentencePieceBpe({corpus_}, 100, dir_.File("small"));
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("vocab_size 100"));
}

TEST_F(SentencePieceTest, MissingTrainingFileIsNamed) {
  absl::Status status = TrainSentencePieceBpe({dir_.File("missing.txt")}, 300, dir_.File("m"));
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("missing.txt"));
}

TEST(MakeTokenizerTest, MakesByteAndRejectsUnknownKinds) {
  auto byte = MakeTokenizer("byte", "");
  ASSERT_TRUE(byte.ok());
  EXPECT_EQ((*byte)->name(), "byte");

  auto unknown = MakeTokenizer("wordpiece", "");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("wordpiece"));

  auto missing = MakeTokenizer("sentencepiece", "/nonexistent/tok.model");
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/tok.model"));
}

}  // namespace
}  // namespace dslaunch::runtime
