#include "runtime/data/distributed_sampler.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/data/document_split.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Every index all ranks read in the step starting at `consumed`, per micro-step.
std::vector<std::vector<int64_t>> StepIndicesByMicroStep(int dp_size, int micro, int accumulation,
                                                         int64_t consumed) {
  std::vector<std::vector<int64_t>> steps(accumulation);
  for (int rank = 0; rank < dp_size; ++rank) {
    DistributedSampler sampler(rank, dp_size, micro, accumulation);
    for (int m = 0; m < accumulation; ++m) {
      for (int64_t index : sampler.MicroBatchIndices(consumed, m)) steps[m].push_back(index);
    }
  }
  for (auto& indices : steps) std::sort(indices.begin(), indices.end());
  return steps;
}

std::vector<int64_t> Flatten(const std::vector<std::vector<int64_t>>& steps) {
  std::vector<int64_t> all;
  for (const auto& indices : steps) all.insert(all.end(), indices.begin(), indices.end());
  std::sort(all.begin(), all.end());
  return all;
}

TEST(DistributedSamplerTest, FollowsTheDocumentedFormula) {
  DistributedSampler sampler(/*dp_rank=*/1, /*dp_size=*/2, /*micro_batch=*/3, /*accumulation=*/2);
  EXPECT_EQ(sampler.global_batch(), 12);
  EXPECT_THAT(sampler.MicroBatchIndices(100, 0), ElementsAre(103, 104, 105));
  EXPECT_THAT(sampler.MicroBatchIndices(100, 1), ElementsAre(109, 110, 111));
}

TEST(DistributedSamplerTest, RanksTogetherReadWhatOneRankWould) {
  // Global batch 8 split three ways reads the same samples, micro-step by micro-step.
  for (int64_t consumed : {0, 8, 800}) {
    auto one = StepIndicesByMicroStep(1, 8, 1, consumed);
    auto two = StepIndicesByMicroStep(2, 4, 1, consumed);
    auto four = StepIndicesByMicroStep(4, 2, 1, consumed);
    EXPECT_EQ(one, two);
    EXPECT_EQ(one, four);
    std::vector<int64_t> expected(8);
    for (int i = 0; i < 8; ++i) expected[i] = consumed + i;
    EXPECT_EQ(one[0], expected);
  }
}

TEST(DistributedSamplerTest, AStepReadsItsGlobalBatchWithoutRepeats) {
  const std::vector<std::tuple<int, int, int>> shapes = {{1, 8, 2}, {2, 4, 2}, {4, 1, 4}, {2, 2, 4}};
  for (auto [dp, micro, accumulation] : shapes) {
    std::vector<int64_t> all = Flatten(StepIndicesByMicroStep(dp, micro, accumulation, 16));
    ASSERT_EQ(all.size(), 16u);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(all[i], 16 + i) << dp << "x" << micro << "x" << accumulation;
  }
}

TEST(DistributedSamplerTest, ResumingFromTheCounterContinuesTheOrder) {
  // Three steps at dp=2; then resume at consumed = 3 * G on dp=4 with the same G.
  std::set<int64_t> read;
  int64_t consumed = 0;
  for (int step = 0; step < 3; ++step) {
    for (int64_t index : Flatten(StepIndicesByMicroStep(2, 2, 2, consumed))) {
      EXPECT_TRUE(read.insert(index).second) << "read twice: " << index;
    }
    consumed += DistributedSampler(0, 2, 2, 2).global_batch();
  }
  EXPECT_EQ(consumed, 24);
  std::vector<int64_t> resumed = Flatten(StepIndicesByMicroStep(4, 1, 2, consumed));
  EXPECT_EQ(resumed.front(), 24);
  EXPECT_EQ(resumed.back(), 31);
  for (int64_t index : resumed) EXPECT_FALSE(read.count(index));
}

TEST(DistributedSamplerTest, CreateRejectsBadShapes) {
  EXPECT_TRUE(DistributedSampler::Create(0, 1, 1, 1).ok());
  EXPECT_THAT(DistributedSampler::Create(2, 2, 1, 1).status().message(), HasSubstr("rank 2"));
  EXPECT_FALSE(DistributedSampler::Create(0, 0, 1, 1).ok());
  EXPECT_FALSE(DistributedSampler::Create(0, 1, 0, 1).ok());
  EXPECT_FALSE(DistributedSampler::Create(0, 1, 1, 0).ok());
}

TEST(DocumentSplitTest, HoldsOutTheLastDocuments) {
  auto split = SplitDocuments(100, 0.1);
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->train_begin, 0);
  EXPECT_EQ(split->train_end, 90);
  EXPECT_EQ(split->validation_begin, 90);
  EXPECT_EQ(split->validation_end, 100);

  EXPECT_EQ(SplitDocuments(100, 0.0)->validation_begin, 100);
  EXPECT_EQ(SplitDocuments(10, 0.001)->validation_begin, 9);  // at least one
  EXPECT_EQ(SplitDocuments(3, 0.9)->train_end, 1);            // never all
  EXPECT_FALSE(SplitDocuments(1, 0.5).ok());
  EXPECT_FALSE(SplitDocuments(10, 1.0).ok());
  EXPECT_FALSE(SplitDocuments(10, -0.1).ok());
}

}  // namespace
}  // namespace dslaunch::runtime
