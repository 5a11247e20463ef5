#include "runtime/data/instruction_samples.h"

#include <algorithm>
#include <set>
#include <thread>

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int32_t X = kIgnoreLabel;
constexpr int32_t kPad = 2;

struct Sample {
  std::vector<int32_t> input_ids, targets, position_ids, segment_ids;
};

// Hand-made records (bos 1, eos 2); positions = tokens - 1.
//   A: 4 positions, B: 4, C: 3, D: 8.
const std::vector<EncodedRecord> kRecords = {
    {{1, 10, 11, 20, 2}, {0, 0, 0, 1, 1}},
    {{1, 12, 21, 22, 2}, {0, 0, 1, 1, 1}},
    {{1, 13, 23, 2}, {0, 0, 1, 1}},
    {{1, 14, 15, 16, 24, 25, 26, 27, 2}, {0, 0, 0, 0, 1, 1, 1, 1, 1}},
};

class InstructionSamplesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto writer = InstructionDatasetWriter::Create(dir_.File("d"), 300);
    ASSERT_TRUE(writer.ok());
    for (const EncodedRecord& record : kRecords) ASSERT_TRUE((*writer)->AddRecord(record).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
    auto dataset = InstructionDataset::Open(dir_.File("d"));
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    dataset_ = std::move(*dataset);
  }

  std::unique_ptr<InstructionSamples> Make(int length, bool packing,
                                           LongRecordPolicy policy = LongRecordPolicy::kRefuse, uint64_t seed = 7) {
    InstructionSamplesOptions options;
    options.sequence_length = length;
    options.packing = packing;
    options.on_long_record = policy;
    options.pad_id = kPad;
    options.seed = seed;
    auto samples = InstructionSamples::Create(dataset_.get(), options);
    EXPECT_TRUE(samples.ok()) << samples.status();
    return samples.ok() ? std::move(*samples) : nullptr;
  }

  static Sample At(const InstructionSamples& samples, int64_t position) {
    const int n = samples.sequence_length();
    Sample s{std::vector<int32_t>(n, -7), std::vector<int32_t>(n, -7), std::vector<int32_t>(n, -7),
             std::vector<int32_t>(n, -7)};
    EXPECT_TRUE(samples.GetSampleAt(position, {s.input_ids.data(), s.targets.data(), s.position_ids.data(),
                                               s.segment_ids.data()}).ok());
    return s;
  }

  TestTempDir dir_;
  std::unique_ptr<InstructionDataset> dataset_;
};

TEST_F(InstructionSamplesTest, PaddedLayoutIsOneRecordPerSample) {
  auto samples = Make(8, /*packing=*/false);
  ASSERT_NE(samples, nullptr);
  EXPECT_EQ(samples->sample_count(), 4);
  Sample a = At(*samples, 0);
  EXPECT_THAT(a.input_ids, ElementsAre(1, 10, 11, 20, kPad, kPad, kPad, kPad));
  EXPECT_THAT(a.targets, ElementsAre(X, X, 20, 2, X, X, X, X));
  EXPECT_THAT(a.position_ids, ElementsAre(0, 1, 2, 3, 0, 0, 0, 0));
  EXPECT_THAT(a.segment_ids, ElementsAre(1, 1, 1, 1, 0, 0, 0, 0));
  Sample d = At(*samples, 3);  // exactly sequence_length positions: no padding
  EXPECT_THAT(d.input_ids, ElementsAre(1, 14, 15, 16, 24, 25, 26, 27));
  EXPECT_THAT(d.targets, ElementsAre(X, X, X, 24, 25, 26, 27, 2));
  EXPECT_THAT(d.position_ids, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(d.segment_ids, ElementsAre(1, 1, 1, 1, 1, 1, 1, 1));
  EXPECT_EQ(samples->filled_positions(), 4 + 4 + 3 + 8);
  EXPECT_EQ(samples->Summary(), "4 records in 4 samples of 8 (padded, 59.4% filled)");
}

TEST_F(InstructionSamplesTest, PackedLayoutKeepsRecordsWholeAndApart) {
  auto samples = Make(8, /*packing=*/true);
  ASSERT_NE(samples, nullptr);
  // A+B fill the first sample; C starts the second; D (8) does not fit after C (3).
  EXPECT_EQ(samples->sample_count(), 3);
  Sample ab = At(*samples, 0);
  EXPECT_THAT(ab.input_ids, ElementsAre(1, 10, 11, 20, 1, 12, 21, 22));
  EXPECT_THAT(ab.targets, ElementsAre(X, X, 20, 2, X, 21, 22, 2));
  EXPECT_THAT(ab.position_ids, ElementsAre(0, 1, 2, 3, 0, 1, 2, 3));
  EXPECT_THAT(ab.segment_ids, ElementsAre(1, 1, 1, 1, 2, 2, 2, 2));
  Sample c = At(*samples, 1);
  EXPECT_THAT(c.input_ids, ElementsAre(1, 13, 23, kPad, kPad, kPad, kPad, kPad));
  EXPECT_THAT(c.targets, ElementsAre(X, 23, 2, X, X, X, X, X));
  EXPECT_THAT(c.position_ids, ElementsAre(0, 1, 2, 0, 0, 0, 0, 0));
  EXPECT_THAT(c.segment_ids, ElementsAre(1, 1, 1, 0, 0, 0, 0, 0));
  EXPECT_THAT(At(*samples, 2).segment_ids, ElementsAre(1, 1, 1, 1, 1, 1, 1, 1));
  EXPECT_EQ(samples->Summary(), "4 records in 3 samples of 8 (packed, 79.2% filled)");

  // Sequence 7: A alone (B does not fit after it), then B+C exactly.
  auto seven = Make(7, /*packing=*/true, LongRecordPolicy::kSkip);
  ASSERT_NE(seven, nullptr);
  EXPECT_EQ(seven->sample_count(), 2);
  EXPECT_THAT(At(*seven, 1).segment_ids, ElementsAre(1, 1, 1, 1, 2, 2, 2));
  EXPECT_THAT(At(*seven, 1).position_ids, ElementsAre(0, 1, 2, 3, 0, 1, 2));
  EXPECT_THAT(At(*seven, 1).targets, ElementsAre(X, 21, 22, 2, X, 23, 2));
}

TEST_F(InstructionSamplesTest, LongRecordsAreRefusedSkippedOrTruncatedAsAsked) {
  InstructionSamplesOptions options;
  options.sequence_length = 7;
  auto refused = InstructionSamples::Create(dataset_.get(), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("document 3 has 9 tokens, more than sequence_length 7"));
  EXPECT_THAT(refused.status().message(), HasSubstr(dir_.File("d")));

  auto skipped = Make(7, false, LongRecordPolicy::kSkip);
  ASSERT_NE(skipped, nullptr);
  EXPECT_EQ(skipped->sample_count(), 3);
  EXPECT_EQ(skipped->record_count(), 3);
  EXPECT_EQ(skipped->skipped_long_records(), 1);
  EXPECT_THAT(skipped->Summary(), HasSubstr("; 1 long records skipped"));

  auto truncated = Make(7, false, LongRecordPolicy::kTruncate);
  ASSERT_NE(truncated, nullptr);
  EXPECT_EQ(truncated->sample_count(), 4);
  EXPECT_EQ(truncated->truncated_long_records(), 1);
  Sample d = At(*truncated, 3);
  EXPECT_THAT(d.input_ids, ElementsAre(1, 14, 15, 16, 24, 25, 26));
  EXPECT_THAT(d.targets, ElementsAre(X, X, X, 24, 25, 26, 27));  // eos cut off, as asked

  // Truncated to 3 positions, record D keeps no response token (its first
  // label is token 4): skipped, counted, never a row of no targets.
  auto short_rows = Make(3, false, LongRecordPolicy::kTruncate);
  ASSERT_NE(short_rows, nullptr);
  EXPECT_EQ(short_rows->record_count(), 3);
  EXPECT_EQ(short_rows->truncated_long_records(), 2);
  EXPECT_EQ(short_rows->truncated_unlabeled_records(), 1);
  EXPECT_THAT(short_rows->Summary(), HasSubstr("1 long records skipped: truncating them left no response token"));
  for (int64_t i = 0; i < short_rows->sample_count(); ++i) {
    const Sample s = At(*short_rows, i);
    EXPECT_TRUE(std::any_of(s.targets.begin(), s.targets.end(), [](int32_t t) { return t != X; })) << "sample " << i;
  }

  // A sequence no record fits in.
  InstructionSamplesOptions tiny;
  tiny.sequence_length = 2;
  tiny.on_long_record = LongRecordPolicy::kSkip;
  EXPECT_THAT(InstructionSamples::Create(dataset_.get(), tiny).status().message(), HasSubstr("no record"));
}

TEST_F(InstructionSamplesTest, DocumentRangesSelectRecords) {
  InstructionSamplesOptions options;
  options.sequence_length = 8;
  options.first_document = 2;
  options.end_document = 3;
  auto samples = InstructionSamples::Create(dataset_.get(), options);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ((*samples)->sample_count(), 1);
  EXPECT_THAT(At(**samples, 0).input_ids, ElementsAre(1, 13, 23, 0, 0, 0, 0, 0));  // pad_id 0 by default
  options.end_document = 5;
  EXPECT_THAT(InstructionSamples::Create(dataset_.get(), options).status().message(), HasSubstr("outside"));
}

TEST_F(InstructionSamplesTest, EpochsArePermutationsFixedBySeed) {
  auto samples = Make(8, false);
  auto again = Make(8, false);
  auto other_seed = Make(8, false, LongRecordPolicy::kRefuse, 8);
  ASSERT_NE(samples, nullptr);
  std::set<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 6; ++epoch) {
    std::vector<int64_t> order = samples->EpochOrder(epoch);
    EXPECT_EQ(order, again->EpochOrder(epoch));
    orders.insert(order);
    EXPECT_THAT(std::set<int64_t>(order.begin(), order.end()), ElementsAre(0, 1, 2, 3));
    for (int64_t p = 0; p < samples->sample_count(); ++p) {
      // GetSample(global) reads the epoch's p-th sample.
      Sample by_index;
      for (auto* v : {&by_index.input_ids, &by_index.targets, &by_index.position_ids, &by_index.segment_ids}) {
        v->assign(8, 0);
      }
      ASSERT_TRUE(samples->GetSample(epoch * 4 + p, {by_index.input_ids.data(), by_index.targets.data(),
                                                     by_index.position_ids.data(), by_index.segment_ids.data()})
                      .ok());
      Sample expected = At(*samples, order[p]);
      EXPECT_EQ(by_index.input_ids, expected.input_ids);
      EXPECT_EQ(by_index.targets, expected.targets);
    }
  }
  EXPECT_GT(orders.size(), 1u);  // epochs differ
  bool seeds_differ = false;
  for (int64_t epoch = 0; epoch < 6; ++epoch) seeds_differ |= samples->EpochOrder(epoch) != other_seed->EpochOrder(epoch);
  EXPECT_TRUE(seeds_differ);
}

TEST_F(InstructionSamplesTest, ConcurrentReadersSeeTheSameSamples) {
  auto samples = Make(8, true);
  ASSERT_NE(samples, nullptr);
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::vector<int32_t> a(8), b(8), c(8), d(8);
      for (int64_t g = 0; g < 300; ++g) {
        const int64_t index = (g * 7 + t) % 30;  // crosses epochs back and forth
        if (!samples->GetSample(index, {a.data(), b.data(), c.data(), d.data()}).ok()) ++mismatches[t];
        const int64_t position = samples->EpochOrder(index / 3)[index % 3];
        Sample expected = At(*samples, position);
        if (a != expected.input_ids || b != expected.targets) ++mismatches[t];
      }
    });
  }
  for (auto& reader : readers) reader.join();
  EXPECT_THAT(mismatches, ElementsAre(0, 0, 0, 0));
}

}  // namespace
}  // namespace dslaunch::runtime
