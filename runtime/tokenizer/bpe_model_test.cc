#include "runtime/tokenizer/bpe_model.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::flat_hash_map<std::string, int32_t> Vocab(std::initializer_list<const char*> tokens) {
  absl::flat_hash_map<std::string, int32_t> vocab;
  int32_t id = 0;
  for (const char* token : tokens) vocab[token] = id++;
  return vocab;
}

std::vector<int32_t> Encode(const BpeModel& model, absl::string_view word) {
  std::vector<int32_t> ids;
  model.EncodeWord(word, &ids);
  return ids;
}

TEST(BpeModelTest, LowerRankMergesFirst) {
  //                     0    1    2    3     4     5
  auto vocab = Vocab({"a", "b", "c", "ab", "bc", "abc"});
  // "b c" outranks "a b": "abc" -> a + bc, and "a bc" is not a merge.
  auto model = BpeModel::Create(vocab, {{"b", "c"}, {"a", "b"}}, {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT(Encode(**model, "abc"), ElementsAre(0, 4));
  auto other = BpeModel::Create(vocab, {{"a", "b"}, {"b", "c"}, {"ab", "c"}}, {});
  ASSERT_TRUE(other.ok());
  EXPECT_THAT(Encode(**other, "abc"), ElementsAre(5));
}

TEST(BpeModelTest, EqualRanksMergeLeftToRight) {
  auto model = BpeModel::Create(Vocab({"a", "aa"}), {{"a", "a"}}, {});
  ASSERT_TRUE(model.ok());
  EXPECT_THAT(Encode(**model, "aaa"), ElementsAre(1, 0));
  EXPECT_THAT(Encode(**model, "aaaa"), ElementsAre(1, 1));
}

TEST(BpeModelTest, ByteFallbackThenUnk) {
  //                      0        1       2        3       4
  auto vocab = Vocab({"<unk>", "a", "<0xC3>", "<0xA9>", "<0xE2>"});
  BpeOptions options;
  options.unk_id = 0;
  options.byte_fallback = true;
  options.fuse_unk = true;
  auto model = BpeModel::Create(vocab, {}, options);
  ASSERT_TRUE(model.ok());
  // é = C3 A9: both byte pieces exist. ☃ = E2 98 83: two are missing, so unk,
  // and two unknown characters in a row fuse into one unk.
  EXPECT_THAT(Encode(**model, "a\xC3\xA9" "a"), ElementsAre(1, 2, 3, 1));
  EXPECT_THAT(Encode(**model, "a\xE2\x98\x83\xE2\x98\x83" "a"), ElementsAre(1, 0, 1));
  options.fuse_unk = false;
  auto unfused = BpeModel::Create(vocab, {}, options);
  ASSERT_TRUE(unfused.ok());
  EXPECT_THAT(Encode(**unfused, "\xE2\x98\x83\xE2\x98\x83"), ElementsAre(0, 0));
  // No unk token, no byte pieces: the character is dropped, as tokenizers does.
  auto bare = BpeModel::Create(Vocab({"a"}), {}, {});
  ASSERT_TRUE(bare.ok());
  EXPECT_THAT(Encode(**bare, "a\xE2\x98\x83" "a"), ElementsAre(0, 0));
}

TEST(BpeModelTest, IgnoreMergesTakesWholeWords) {
  // "abc" is in the vocabulary but no merge makes it.
  auto vocab = Vocab({"a", "b", "c", "ab", "abc"});
  BpeOptions options;
  auto merging = BpeModel::Create(vocab, {{"a", "b"}}, options);
  ASSERT_TRUE(merging.ok());
  EXPECT_THAT(Encode(**merging, "abc"), ElementsAre(3, 2));
  options.ignore_merges = true;
  auto whole = BpeModel::Create(vocab, {{"a", "b"}}, options);
  ASSERT_TRUE(whole.ok());
  EXPECT_THAT(Encode(**whole, "abc"), ElementsAre(4));
  EXPECT_THAT(Encode(**whole, "abcabc"), ElementsAre(3, 2, 3, 2));
}

TEST(BpeModelTest, CachedWordsGiveTheSameIds) {
  auto model = BpeModel::Create(Vocab({"a", "b", "ab"}), {{"a", "b"}}, {});
  ASSERT_TRUE(model.ok());
  for (int i = 0; i < 3; ++i) EXPECT_THAT(Encode(**model, "abab"), ElementsAre(2, 2));
}

TEST(BpeModelTest, RefusesMergesOutsideTheVocabulary) {
  auto vocab = Vocab({"a", "b", "ab"});
  auto missing_left = BpeModel::Create(vocab, {{"a", "b"}, {"x", "b"}}, {});
  ASSERT_FALSE(missing_left.ok());
  EXPECT_THAT(missing_left.status().message(), HasSubstr("merges[1] (\"x\" + \"b\"): its left token"));
  auto missing_result = BpeModel::Create(vocab, {{"b", "a"}}, {});
  ASSERT_FALSE(missing_result.ok());
  EXPECT_THAT(missing_result.status().message(), HasSubstr("the token it makes"));
}

}  // namespace
}  // namespace dslaunch::runtime
