#include "runtime/data/gpt_samples.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/data/sample_permutation.h"
#include "common/test_temp_dir.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A dataset whose token at stream position p is p, split into documents of
// the given sizes.
std::unique_ptr<IndexedDataset> CountingDataset(const TestTempDir& dir,
                                                const std::vector<int>& document_sizes) {
  auto writer = IndexedDatasetWriter::Create(dir.File("count"), 100000);
  EXPECT_TRUE(writer.ok());
  int32_t next = 0;
  for (int size : document_sizes) {
    std::vector<int32_t> document(size);
    for (int32_t& token : document) token = next++;
    EXPECT_TRUE((*writer)->AddDocument(document).ok());
  }
  EXPECT_TRUE((*writer)->Finish().ok());
  auto dataset = IndexedDataset::Open(dir.File("count"));
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  return std::move(*dataset);
}

TEST(EpochPermutationTest, IsAPermutationFixedBySeedAndEpoch) {
  std::vector<int64_t> order = EpochPermutation(1000, 7, 0);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(order, identity);
  EXPECT_EQ(order, EpochPermutation(1000, 7, 0));
  EXPECT_NE(order, EpochPermutation(1000, 8, 0));
  EXPECT_NE(order, EpochPermutation(1000, 7, 1));
  EXPECT_TRUE(EpochPermutation(0, 7, 0).empty());
  EXPECT_THAT(EpochPermutation(1, 7, 3), ElementsAre(0));
}

// Pins the algorithm: a change here reorders every resumed run's data.
TEST(EpochPermutationTest, MatchesTheRecordedOrder) {
  EXPECT_THAT(EpochPermutation(10, 1234, 0), ElementsAre(2, 0, 3, 5, 9, 1, 7, 6, 4, 8));
}

TEST(EpochPermutationTest, OrdersAreUniform) {
  std::map<std::vector<int64_t>, int> counts;
  for (uint64_t seed = 0; seed < 6000; ++seed) ++counts[EpochPermutation(3, seed, 0)];
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [order, count] : counts) {
    EXPECT_NEAR(count, 1000, 150) << "order starting " << order[0];
  }
}

TEST(GptSamplesTest, CutsOverlappingSamplesOfSequencePlusOne) {
  TestTempDir dir;
  auto dataset = CountingDataset(dir, {30, 41, 30});  // 101 tokens
  auto samples = GptSamples::Create(dataset.get(), 10, /*seed=*/1);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ((*samples)->sample_count(), 10);
  EXPECT_EQ((*samples)->tokens_per_sample(), 11);

  std::vector<int64_t> order = (*samples)->EpochOrder(0);
  std::vector<int> times_target(101, 0);
  std::vector<int32_t> sample(11);
  for (int64_t position = 0; position < 10; ++position) {
    ASSERT_TRUE((*samples)->GetSample(position, sample.data()).ok());
    for (int k = 0; k < 11; ++k) ASSERT_EQ(sample[k], order[position] * 10 + k);
    // targets (sample[1..]) are the inputs (sample[..10]) shifted by one
    for (int k = 1; k < 11; ++k) ++times_target[sample[k]];
  }
  EXPECT_EQ(times_target[0], 0);
  for (int token = 1; token < 101; ++token) EXPECT_EQ(times_target[token], 1) << token;
}

TEST(GptSamplesTest, LaterEpochsUseTheirOwnOrder) {
  TestTempDir dir;
  auto dataset = CountingDataset(dir, {201});
  auto samples = GptSamples::Create(dataset.get(), 4, /*seed=*/99);
  ASSERT_TRUE(samples.ok());
  const int64_t count = (*samples)->sample_count();
  ASSERT_EQ(count, 50);
  std::vector<int64_t> epoch2 = (*samples)->EpochOrder(2);
  EXPECT_NE(epoch2, (*samples)->EpochOrder(0));
  std::vector<int32_t> sample(5);
  ASSERT_TRUE((*samples)->GetSample(2 * count + 7, sample.data()).ok());
  EXPECT_EQ(sample[0], epoch2[7] * 4);
  ASSERT_TRUE((*samples)->GetSample(0, sample.data()).ok());  // back to epoch 0
  EXPECT_EQ(sample[0], (*samples)->EpochOrder(0)[0] * 4);
  EXPECT_FALSE((*samples)->GetSample(-1, sample.data()).ok());
}

TEST(GptSamplesTest, CountsWholeSamplesOnly) {
  TestTempDir dir;
  auto dataset = CountingDataset(dir, {100});
  EXPECT_EQ((*GptSamples::Create(dataset.get(), 10, 1))->sample_count(), 9);
  EXPECT_EQ((*GptSamples::Create(dataset.get(), 99, 1))->sample_count(), 1);
  auto too_long = GptSamples::Create(dataset.get(), 100, 1);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.status().message(), HasSubstr("needs 101"));
}

TEST(GptSamplesTest, RangeRestrictsSamplesToItsDocuments) {
  TestTempDir dir;
  auto dataset = CountingDataset(dir, {50, 21});
  TokenRange tail = dataset->DocumentTokens(1, 2);  // tokens [50, 71)
  auto samples = GptSamples::Create(dataset.get(), tail, 5, 3);
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ((*samples)->sample_count(), 4);
  std::vector<int32_t> sample(6);
  for (int64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE((*samples)->GetSample(i, sample.data()).ok());
    EXPECT_GE(sample[0], 50);
    EXPECT_LE(sample[5], 70);
  }
  EXPECT_FALSE(GptSamples::Create(dataset.get(), TokenRange{60, 80}, 5, 3).ok());
}

}  // namespace
}  // namespace dslaunch::runtime
