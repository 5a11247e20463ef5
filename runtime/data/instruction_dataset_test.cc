#include "runtime/data/instruction_dataset.h"

#include <cerrno>

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fs/fault_injecting_file_system.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class InstructionDatasetTest : public ::testing::Test {
 protected:
  std::string Prefix(const std::string& name) const { return dir_.File(name); }

  void Write(const std::string& prefix, const std::vector<EncodedRecord>& records, FileSystem& fs = FileSystem::Default()) {
    auto writer = InstructionDatasetWriter::Create(prefix, 300, fs);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (const EncodedRecord& record : records) ASSERT_TRUE((*writer)->AddRecord(record).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }

  // A plain indexed dataset of `lengths` documents at `prefix` (zeros).
  void WriteIndexed(const std::string& prefix, int64_t vocab, const std::vector<int>& lengths) {
    auto writer = IndexedDatasetWriter::Create(prefix, vocab);
    ASSERT_TRUE(writer.ok());
    for (int n : lengths) ASSERT_TRUE((*writer)->AddDocument(std::vector<int32_t>(n, 0)).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }

  TestTempDir dir_;
};

const EncodedRecord kFirst{{1, 10, 20, 2}, {0, 0, 1, 1}};
const EncodedRecord kSecond{{1, 11, 12, 21, 2}, {0, 0, 0, 1, 1}};

TEST_F(InstructionDatasetTest, RecordsAndMasksRoundTrip) {
  Write(Prefix("d"), {kFirst, kSecond});
  ASSERT_TRUE(InstructionDataset::Exists(Prefix("d")));
  auto dataset = InstructionDataset::Open(Prefix("d"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->num_documents(), 2);
  EXPECT_EQ((*dataset)->num_tokens(), 9);
  EXPECT_EQ((*dataset)->vocab_size(), 300);
  EXPECT_EQ((*dataset)->DocumentLength(1), 5);
  std::vector<int32_t> tokens(5), mask(5);
  ASSERT_TRUE((*dataset)->CopyDocument(1, 5, tokens.data(), mask.data()).ok());
  EXPECT_THAT(tokens, ElementsAre(1, 11, 12, 21, 2));
  EXPECT_THAT(mask, ElementsAre(0, 0, 0, 1, 1));
  EXPECT_FALSE((*dataset)->CopyDocument(0, 5, tokens.data(), mask.data()).ok());
  EXPECT_FALSE((*dataset)->CopyDocument(2, 1, tokens.data(), mask.data()).ok());
}

TEST_F(InstructionDatasetTest, ARecordWithoutOneMaskValuePerTokenIsRefused) {
  auto writer = InstructionDatasetWriter::Create(Prefix("x"), 300);
  ASSERT_TRUE(writer.ok());
  EXPECT_THAT((*writer)->AddRecord({{1, 2, 3}, {0, 1}}).message(), HasSubstr("3 tokens but 2 mask values"));
}

TEST_F(InstructionDatasetTest, PairsThatDisagreeAreRefusedNamingBothFiles) {
  const std::string prefix = Prefix("bad");
  WriteIndexed(prefix, 300, {4, 5});
  // A text dataset: no mask at all.
  auto missing = InstructionDataset::Open(prefix);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(prefix + ".loss_mask.idx"));
  EXPECT_THAT(missing.status().message(), HasSubstr("prepared as text"));
  EXPECT_FALSE(InstructionDataset::Exists(prefix));

  struct Case {
    int64_t vocab;
    std::vector<int> lengths;
    std::string what;
  };
  for (const Case& c : {Case{2, {4, 5, 1}, "2 documents against 3"}, Case{2, {4, 6}, "9 tokens against 10"},
                        Case{2, {5, 4}, "document 0 has 4 tokens against 5 mask values"},
                        Case{3, {4, 5}, "the mask's vocab_size is 3, not 2"}}) {
    WriteIndexed(LossMaskPrefix(prefix), c.vocab, c.lengths);
    auto opened = InstructionDataset::Open(prefix);
    EXPECT_EQ(opened.status().code(), absl::StatusCode::kDataLoss) << c.what;
    EXPECT_THAT(opened.status().message(), HasSubstr(c.what));
    EXPECT_THAT(opened.status().message(), HasSubstr(prefix + ".idx and loss mask " + prefix + ".loss_mask.idx"));
  }
  WriteIndexed(LossMaskPrefix(prefix), 2, {4, 5});
  EXPECT_TRUE(InstructionDataset::Open(prefix).ok());
}

TEST_F(InstructionDatasetTest, AnUnfinishedWriterLeavesThePreviousPair) {
  Write(Prefix("p"), {kFirst});
  {
    auto writer = InstructionDatasetWriter::Create(Prefix("p"), 300);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->AddRecord(kSecond).ok());
  }  // destroyed before Finish (a refusal)
  auto dataset = InstructionDataset::Open(Prefix("p"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->num_documents(), 1);
  EXPECT_EQ((*dataset)->DocumentLength(0), 4);
  for (const char* temp : {".bin.tmp", ".idx.tmp", ".loss_mask.bin.tmp", ".loss_mask.idx.tmp"}) {
    EXPECT_FALSE(FileSystem::Default().Exists(Prefix("p") + temp)) << temp;
  }
}

TEST_F(InstructionDatasetTest, ACommitThatFailsBetweenTheTwoLeavesNoPair) {
  Write(Prefix("c"), {kFirst});
  // The mask commits, then the tokens' rename fails: the old tokens must not
  // stand beside the new mask.
  FaultInjectingFileSystem fs(FileSystem::Default());
  fs.FailNth(FsOp::kRename, 1, ENOSPC, Prefix("c") + ".bin.tmp");
  {
    auto writer = InstructionDatasetWriter::Create(Prefix("c"), 300, fs);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->AddRecord(kSecond).ok());
    EXPECT_EQ((*writer)->Finish().code(), absl::StatusCode::kResourceExhausted);
  }
  EXPECT_TRUE(IndexedDataset::Exists(LossMaskPrefix(Prefix("c"))));  // the new mask did commit
  EXPECT_FALSE(InstructionDataset::Exists(Prefix("c")));
  EXPECT_EQ(InstructionDataset::Open(Prefix("c")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dslaunch::runtime
