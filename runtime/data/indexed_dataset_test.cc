#include "runtime/data/indexed_dataset.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fs/fault_injecting_file_system.h"
#include "runtime/fs/file_system.h"
#include "common/test_temp_dir.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

void WriteDataset(const std::string& prefix, int64_t vocab_size,
                  const std::vector<std::vector<int32_t>>& documents) {
  auto writer = IndexedDatasetWriter::Create(prefix, vocab_size);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (const auto& document : documents) ASSERT_TRUE((*writer)->AddDocument(document).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
}

std::vector<int32_t> Tokens(const IndexedDataset& dataset, int64_t offset, int64_t count) {
  std::vector<int32_t> out(count);
  EXPECT_TRUE(dataset.CopyTokens(offset, count, out.data()).ok());
  return out;
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

class IndexedDatasetTest : public ::testing::Test {
 protected:
  std::string Prefix(const std::string& name) const { return dir_.File(name); }
  TestTempDir dir_;
};

TEST_F(IndexedDatasetTest, RoundTripsUint16) {
  WriteDataset(Prefix("d"), 257, {{1, 2, 3, 256}, {}, {255, 256}});
  EXPECT_EQ(FileSize(Prefix("d") + ".bin"), 6 * 2);
  auto dataset = IndexedDataset::Open(Prefix("d"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const IndexedDataset& d = **dataset;
  EXPECT_EQ(d.num_documents(), 3);
  EXPECT_EQ(d.num_tokens(), 6);
  EXPECT_EQ(d.vocab_size(), 257);
  EXPECT_EQ(d.token_bytes(), 2);
  EXPECT_THAT(Tokens(d, 0, 6), ElementsAre(1, 2, 3, 256, 255, 256));
  EXPECT_THAT(Tokens(d, 3, 2), ElementsAre(256, 255));
  EXPECT_EQ(d.DocumentTokens(2, 3).begin, 4);
  EXPECT_EQ(d.DocumentTokens(1, 2).size(), 0);
  EXPECT_EQ(d.DocumentTokens(0, 3).size(), 6);
}

TEST_F(IndexedDatasetTest, RoundTripsUint32) {
  WriteDataset(Prefix("wide"), 70000, {{69999, 65536, 0}, {65535, 1}});
  EXPECT_EQ(FileSize(Prefix("wide") + ".bin"), 5 * 4);
  auto dataset = IndexedDataset::Open(Prefix("wide"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->token_bytes(), 4);
  EXPECT_THAT(Tokens(**dataset, 0, 5), ElementsAre(69999, 65536, 0, 65535, 1));
}

TEST_F(IndexedDatasetTest, RejectsIdsOutsideTheVocabulary) {
  auto writer = IndexedDatasetWriter::Create(Prefix("v"), 257);
  ASSERT_TRUE(writer.ok());
  absl::Status status = (*writer)->AddDocument(std::vector<int32_t>{5, 257});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("257"));
}

TEST_F(IndexedDatasetTest, CopyOutsideTheStreamIsOutOfRange) {
  WriteDataset(Prefix("r"), 257, {{1, 2, 3}});
  auto dataset = IndexedDataset::Open(Prefix("r"));
  ASSERT_TRUE(dataset.ok());
  int32_t out[4];
  EXPECT_EQ((*dataset)->CopyTokens(1, 3, out).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*dataset)->CopyTokens(-1, 1, out).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE((*dataset)->CopyTokens(3, 0, out).ok());
}

TEST_F(IndexedDatasetTest, TruncatedIndexIsReportedWithItsPath) {
  WriteDataset(Prefix("t"), 257, {{1, 2}, {3}});
  const std::string idx = Prefix("t") + ".idx";
  ASSERT_EQ(::truncate(idx.c_str(), FileSize(idx) - 8), 0);
  auto dataset = IndexedDataset::Open(Prefix("t"));
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(dataset.status().message(), HasSubstr(idx));
  EXPECT_THAT(dataset.status().message(), HasSubstr("truncated"));

  ASSERT_EQ(::truncate(idx.c_str(), 10), 0);
  dataset = IndexedDataset::Open(Prefix("t"));
  EXPECT_THAT(dataset.status().message(), HasSubstr("shorter than the 48-byte header"));
}

TEST_F(IndexedDatasetTest, CorruptIndexIsDetected) {
  WriteDataset(Prefix("c"), 257, {{1, 2}, {3}});
  const std::string idx = Prefix("c") + ".idx";
  auto original = FileSystem::Default().ReadFile(idx);
  ASSERT_TRUE(original.ok());

  std::string bad_magic = *original;
  bad_magic[0] = 'X';
  dir_.Write("c.idx", bad_magic);
  EXPECT_THAT(IndexedDataset::Open(Prefix("c")).status().message(), HasSubstr("bad magic"));

  std::string decreasing = *original;
  decreasing[48 + 8] = 5;  // document 0 would end at token 5, after document 1's end
  dir_.Write("c.idx", decreasing);
  EXPECT_THAT(IndexedDataset::Open(Prefix("c")).status().message(),
              HasSubstr("document 1 ends at token 3 before it starts at 5"));
}

TEST_F(IndexedDatasetTest, TokenFileOfTheWrongSizeIsNamed) {
  WriteDataset(Prefix("s"), 257, {{1, 2, 3}});
  const std::string bin = Prefix("s") + ".bin";
  ASSERT_EQ(::truncate(bin.c_str(), 4), 0);
  auto dataset = IndexedDataset::Open(Prefix("s"));
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(dataset.status().message(), HasSubstr(bin));
  EXPECT_THAT(dataset.status().message(), HasSubstr("has 4 bytes"));
}

TEST_F(IndexedDatasetTest, LeftoverTemporaryFilesDoNotOpen) {
  // A crash after both temporary files were written but before the renames.
  WriteDataset(Prefix("done"), 257, {{1, 2, 3}});
  ASSERT_TRUE(FileSystem::Default().Rename(Prefix("done") + ".bin", Prefix("crashed") + ".bin.tmp").ok());
  ASSERT_TRUE(FileSystem::Default().Rename(Prefix("done") + ".idx", Prefix("crashed") + ".idx.tmp").ok());
  EXPECT_FALSE(IndexedDataset::Exists(Prefix("crashed")));
  auto dataset = IndexedDataset::Open(Prefix("crashed"));
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dataset.status().message(), HasSubstr("did not finish"));
}

TEST_F(IndexedDatasetTest, AbandonedWriterLeavesThePreviousDatasetAndNoTemporaries) {
  WriteDataset(Prefix("p"), 257, {{7, 8}});
  {
    auto writer = IndexedDatasetWriter::Create(Prefix("p"), 257);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->AddDocument(std::vector<int32_t>{1, 2, 3, 4}).ok());
    EXPECT_TRUE(FileSystem::Default().Exists(Prefix("p") + ".bin.tmp"));
  }  // destroyed without Finish
  EXPECT_FALSE(FileSystem::Default().Exists(Prefix("p") + ".bin.tmp"));
  auto dataset = IndexedDataset::Open(Prefix("p"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_THAT(Tokens(**dataset, 0, 2), ElementsAre(7, 8));

  WriteDataset(Prefix("p"), 70000, {{66000}});  // a finished rewrite replaces it
  dataset = IndexedDataset::Open(Prefix("p"));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_THAT(Tokens(**dataset, 0, 1), ElementsAre(66000));
}

TEST_F(IndexedDatasetTest, ConcurrentReadsAgree) {
  std::vector<int32_t> document(10000);
  for (int i = 0; i < 10000; ++i) document[i] = i % 257;
  WriteDataset(Prefix("m"), 257, {document});
  auto dataset = IndexedDataset::Open(Prefix("m"));
  ASSERT_TRUE(dataset.ok());
  std::vector<std::thread> readers;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::vector<int32_t> out(100);
      for (int64_t offset = t; offset + 100 <= 10000; offset += 97) {
        if (!(*dataset)->CopyTokens(offset, 100, out.data()).ok()) ++mismatches[t];
        for (int i = 0; i < 100; ++i) mismatches[t] += out[i] != document[offset + i];
      }
    });
  }
  for (auto& reader : readers) reader.join();
  EXPECT_THAT(mismatches, ElementsAre(0, 0, 0, 0));
}

TEST_F(IndexedDatasetTest, MissingDatasetIsNotFound) {
  auto dataset = IndexedDataset::Open(Prefix("absent"));
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dataset.status().message(), HasSubstr("absent.idx"));
}

TEST_F(IndexedDatasetTest, ADiskThatFillsDuringTheCommitLeavesThePreviousDatasetAndNamesTheFile) {
  WriteDataset(Prefix("full"), 257, {{7, 8}});
  for (FsOp op : {FsOp::kAppend, FsOp::kSync, FsOp::kRename}) {
    FaultInjectingFileSystem fs(FileSystem::Default());
    const std::string victim = op == FsOp::kRename ? ".bin.tmp" : ".idx.tmp";
    fs.FailNth(op, 1, ENOSPC, victim);
    {
      auto writer = IndexedDatasetWriter::Create(Prefix("full"), 257, fs);
      ASSERT_TRUE(writer.ok());
      ASSERT_TRUE((*writer)->AddDocument(std::vector<int32_t>{1, 2, 3, 4}).ok());
      absl::Status finished = (*writer)->Finish();
      EXPECT_EQ(finished.code(), absl::StatusCode::kResourceExhausted) << FsOpName(op);
      EXPECT_THAT(finished.message(), HasSubstr(absl::StrCat(FsOpName(op), " ", Prefix("full"))));
      EXPECT_THAT(finished.message(), HasSubstr("(ENOSPC)"));
    }
    EXPECT_FALSE(FileSystem::Default().Exists(Prefix("full") + ".bin.tmp")) << FsOpName(op);
    EXPECT_FALSE(FileSystem::Default().Exists(Prefix("full") + ".idx.tmp")) << FsOpName(op);
    if (op == FsOp::kRename) {
      // The old index goes before the renames (an old index must never
      // describe new tokens): no dataset, rather than a wrong one.
      EXPECT_EQ(IndexedDataset::Open(Prefix("full")).status().code(), absl::StatusCode::kNotFound);
    } else {
      auto dataset = IndexedDataset::Open(Prefix("full"));
      ASSERT_TRUE(dataset.ok()) << FsOpName(op) << ": " << dataset.status();
      EXPECT_THAT(Tokens(**dataset, 0, 2), ElementsAre(7, 8));
    }
  }
}

}  // namespace
}  // namespace dslaunch::runtime
