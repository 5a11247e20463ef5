#include "runtime/tensor_parallel/tensor_parallel_layout.h"

#include <functional>
#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;
using testing::InProcessStore;

TEST(TensorParallelLayoutTest, PaddedVocabularyIsAMultipleOfSizeTimesDivisor) {
  EXPECT_EQ(PaddedVocabSize(257, 1, 1), 257);
  EXPECT_EQ(PaddedVocabSize(257, 2, 1), 258);
  EXPECT_EQ(PaddedVocabSize(257, 4, 8), 288);
  EXPECT_EQ(PaddedVocabSize(32000, 8, 128), 32768);
  EXPECT_EQ(PaddedVocabSize(256, 4, 1), 256);
}

TEST(TensorParallelLayoutTest, FusedColumnSlicesTakeTheirShareOfEachPart) {
  // q, k, v of 4 rows each; rank 1 of 2 holds rows 2-3 of each.
  torch::Tensor whole = torch::arange(12 * 3, torch::kFloat).view({12, 3});
  auto mine = SliceForRank(whole, {"qkv.weight", TensorParallelSplit::kColumn, 3}, 1, 2);
  ASSERT_TRUE(mine.ok()) << mine.status();
  torch::Tensor expected = torch::cat({whole.narrow(0, 2, 2), whole.narrow(0, 6, 2), whole.narrow(0, 10, 2)});
  EXPECT_TRUE(torch::equal(*mine, expected));
}

TEST(TensorParallelLayoutTest, RowSlicesSplitTheInputDimension) {
  torch::Tensor whole = torch::arange(3 * 8, torch::kFloat).view({3, 8});
  auto mine = SliceForRank(whole, {"down.weight", TensorParallelSplit::kRow}, 3, 4);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_TRUE(torch::equal(*mine, whole.narrow(1, 6, 2)));
}

TEST(TensorParallelLayoutTest, VocabularySlicesArePaddedWithZeroRows) {
  torch::Tensor whole = torch::ones({5, 2});
  TensorParallelForm form{"embed.weight", TensorParallelSplit::kVocab, 1, 5, PaddedVocabSize(5, 2, 1)};
  auto last = SliceForRank(whole, form, 1, 2);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->size(0), 3);
  EXPECT_TRUE(torch::equal(last->sum(1), torch::tensor({2.0f, 2.0f, 0.0f})));
}

TEST(TensorParallelLayoutTest, RefusesASplitThatDoesNotDivideNamingTheParameter) {
  auto sliced = SliceForRank(torch::ones({6, 2}), {"fc.weight", TensorParallelSplit::kColumn}, 0, 4);
  ASSERT_FALSE(sliced.ok());
  EXPECT_THAT(sliced.status().message(), HasSubstr("fc.weight: dimension 0 (6) does not split into 1 part(s) of 4"));
}

// Note [Shard-only loading]: any run of a slice's rows, read alone, equals
// those rows of the whole slice, for every kind of split and rank, and the
// slice's shape is what SliceShape predicts.
TEST(TensorParallelLayoutTest, SliceRowsEqualTheRowsOfTheWholeSlice) {
  const int64_t vocab = 11;
  struct Case {
    TensorParallelForm form;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases = {
      {{"qkv.weight", TensorParallelSplit::kColumn, 3}, {12, 3}},
      {{"up.weight", TensorParallelSplit::kColumn}, {8, 5}},
      {{"up.bias", TensorParallelSplit::kColumn}, {8}},
      {{"down.weight", TensorParallelSplit::kRow}, {3, 8}},
      {{"embed.weight", TensorParallelSplit::kVocab, 1, vocab, PaddedVocabSize(vocab, 2, 1)}, {vocab, 4}},
  };
  for (const Case& c : cases) {
    const int64_t numel = std::accumulate(c.shape.begin(), c.shape.end(), int64_t{1}, std::multiplies<>());
    torch::Tensor whole = torch::arange(numel, torch::kFloat).view(c.shape) + 1;
    for (int rank = 0; rank < 2; ++rank) {
      auto slice = SliceForRank(whole, c.form, rank, 2);
      ASSERT_TRUE(slice.ok()) << slice.status();
      EXPECT_EQ(SliceShape(c.shape, c.form, 2), slice->sizes().vec()) << c.form.parameter;
      for (int64_t first = 0; first < slice->size(0); ++first) {
        for (int64_t count = 0; first + count <= slice->size(0); ++count) {
          auto rows = SliceRows(whole, c.form, rank, 2, first, count);
          ASSERT_TRUE(rows.ok()) << rows.status();
          EXPECT_TRUE(torch::equal(*rows, slice->narrow(0, first, count)))
              << c.form.parameter << " rank " << rank << " rows " << first << "+" << count;
        }
      }
      EXPECT_FALSE(SliceRows(whole, c.form, rank, 2, slice->size(0), 1).ok()) << c.form.parameter;
    }
  }
  EXPECT_EQ(SliceShape({6, 2}, {"fc.weight", TensorParallelSplit::kColumn}, 4), (std::vector<int64_t>{-1, 2}));
}

// Slicing then gathering gives the whole tensor back on every rank, for each
// kind of split, at group sizes 2 and 4.
TEST(TensorParallelLayoutTest, GatherWholeUndoesSliceForRankOnGloo) {
  torch::manual_seed(3);
  const torch::Tensor fused = torch::randn({24, 5});
  const torch::Tensor row = torch::randn({5, 8});
  const torch::Tensor vocab = torch::randn({13, 4});
  for (int size : {2, 4}) {
    const std::vector<std::pair<TensorParallelForm, torch::Tensor>> cases = {
        {{"qkv.weight", TensorParallelSplit::kColumn, 3}, fused},
        {{"qkv.bias", TensorParallelSplit::kColumn, 3}, fused.select(1, 0).contiguous()},
        {{"proj.weight", TensorParallelSplit::kRow}, row},
        {{"embed.weight", TensorParallelSplit::kVocab, 1, 13, PaddedVocabSize(13, size, 1)}, vocab},
    };
    InProcessStore store;
    store.RunRanks(size, [&](int rank, Communicator& comm) {
      TensorParallelGroup group{&comm, rank, size};
      for (const auto& [form, whole] : cases) {
        auto mine = SliceForRank(whole, form, rank, size);
        ASSERT_TRUE(mine.ok()) << mine.status();
        auto back = GatherWhole(*mine, form, group);
        ASSERT_TRUE(back.ok()) << back.status();
        EXPECT_TRUE(torch::equal(*back, whole)) << form.parameter << " at size " << size << " rank " << rank;
      }
    });
  }
}

// Without a group: the slices of every rank put back together (what a
// checkpoint saved at one degree does when it loads at another), and a
// form's line read back as the form.
TEST(TensorParallelLayoutTest, AssembleWholeUndoesSliceForRankAndFormsRoundTrip) {
  torch::manual_seed(4);
  const TensorParallelForm forms[] = {{"qkv.weight", TensorParallelSplit::kColumn, 3},
                                      {"proj.weight", TensorParallelSplit::kRow},
                                      {"embed.weight", TensorParallelSplit::kVocab, 1, 13, PaddedVocabSize(13, 4, 2)}};
  const torch::Tensor wholes[] = {torch::randn({24, 4}), torch::randn({4, 8}), torch::randn({13, 4})};
  for (int i = 0; i < 3; ++i) {
    std::vector<torch::Tensor> slices;
    for (int rank = 0; rank < 4; ++rank) slices.push_back(SliceForRank(wholes[i], forms[i], rank, 4).value());
    EXPECT_TRUE(torch::equal(AssembleWhole(slices, forms[i]), wholes[i])) << forms[i].parameter;
    auto parsed = ParseFormLine(FormLine(forms[i]));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->parameter, forms[i].parameter);
    EXPECT_EQ(parsed->split, forms[i].split);
    EXPECT_EQ(parsed->fused_parts, forms[i].fused_parts);
    EXPECT_EQ(parsed->vocab_size, forms[i].vocab_size);
    EXPECT_EQ(parsed->padded_vocab_size, forms[i].padded_vocab_size);
  }
  EXPECT_FALSE(ParseFormLine("fc.weight\tdiagonal\t1\t0\t0").ok());
}

}  // namespace
}  // namespace dslaunch::runtime
