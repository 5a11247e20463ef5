// The safetensors writer through the file-system seam: values appended and
// written at offsets land where the header says; a disk that fills, a failed
// fsync or rename, or a writer abandoned halfway leaves no output and no
// temporary file, and an older output at the path stays as it was.
#include "runtime/checkpoint/safetensors_writer.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fs/fault_injecting_file_system.h"
#include "runtime/fs/posix_file_system.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

class SafetensorsWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/safetensors-writer-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    output_ = dir_ + "/model.safetensors";
  }
  void TearDown() override { ASSERT_TRUE(posix_.RemoveTree(dir_).ok()); }

  // Two tensors: "a" [2, 3] then "b" [4].
  static std::vector<SafetensorsEntry> Entries() { return {{"a", {2, 3}}, {"b", {4}}}; }

  // The header's JSON and the data section's values.
  std::pair<std::string, std::vector<float>> Read(const std::string& path) {
    auto bytes = posix_.ReadFile(path, 1 << 20);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (!bytes.ok() || bytes->size() < 8) return {};
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>((*bytes)[i]);
    std::string header = bytes->substr(8, length);
    std::vector<float> values((bytes->size() - 8 - length) / sizeof(float));
    std::memcpy(values.data(), bytes->data() + 8 + length, values.size() * sizeof(float));
    return {header, values};
  }

  bool Left(const std::string& path) { return posix_.Exists(path); }

  PosixFileSystem posix_;
  FaultInjectingFileSystem fs_{posix_};
  std::string dir_, output_;
};

TEST_F(SafetensorsWriterTest, AppendedAndPlacedValuesLandWhereTheHeaderSays) {
  auto writer = SafetensorsWriter::Create(fs_, output_, Entries());
  ASSERT_TRUE(writer.ok()) << writer.status();
  const float first[] = {1, 2, 3};
  const float last[] = {7, 8, 9, 10};
  const float middle[] = {4, 5, 6};
  ASSERT_TRUE((*writer)->Append(first, 3).ok());
  ASSERT_TRUE((*writer)->WriteAt(6, last, 4).ok());    // "b", ahead of its turn
  ASSERT_TRUE((*writer)->WriteAt(3, middle, 3).ok());  // the rest of "a"
  EXPECT_FALSE(Left(output_));                         // nothing at the path before Finish
  ASSERT_TRUE((*writer)->Finish().ok());
  auto [header, values] = Read(output_);
  EXPECT_EQ(header.size() % 8, 0u);
  EXPECT_THAT(header, HasSubstr("\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}"));
  EXPECT_THAT(header, HasSubstr("\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}"));
  EXPECT_EQ(values, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_FALSE(Left(output_ + ".tmp"));
  // The rename was made durable: the folder was synced after it.
  std::vector<FsCall> log = fs_.Log();
  ASSERT_GE(log.size(), 2u);
  EXPECT_EQ(log[log.size() - 2].op, FsOp::kRename);
  EXPECT_EQ(log.back().op, FsOp::kSyncDirectory);
  EXPECT_EQ(log.back().path, dir_);
}

TEST_F(SafetensorsWriterTest, ADiskThatFillsLeavesNoFileAndTheOldOutputStays) {
  const float old_values[10] = {};
  {
    auto old_writer = SafetensorsWriter::Create(fs_, output_, Entries());
    ASSERT_TRUE(old_writer.ok());
    ASSERT_TRUE((*old_writer)->Append(old_values, 10).ok());
    ASSERT_TRUE((*old_writer)->Finish().ok());
  }
  const auto before = Read(output_);
  const float values[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  for (bool placed : {false, true}) {
    fs_.ClearFaults();
    fs_.TruncateNthAppend(placed ? 3 : 4, ENOSPC, ".tmp");  // after the two header appends
    auto writer = SafetensorsWriter::Create(fs_, output_, Entries());
    ASSERT_TRUE(writer.ok());
    absl::Status first = placed ? (*writer)->WriteAt(6, values + 6, 4) : (*writer)->Append(values, 6);
    absl::Status second = placed ? (*writer)->WriteAt(0, values, 6) : (*writer)->Append(values + 6, 4);
    const absl::Status& failed = placed ? first : second;
    EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted) << failed;
    EXPECT_THAT(std::string(failed.message()),
                HasSubstr("write " + output_ + ".tmp: No space left on device (ENOSPC)"));
    EXPECT_TRUE(Left(output_ + ".tmp"));  // until the writer goes
    writer->reset();
    EXPECT_FALSE(Left(output_ + ".tmp")) << (placed ? "WriteAt" : "Append");
    EXPECT_EQ(Read(output_), before);
  }
}

TEST_F(SafetensorsWriterTest, AFailedSyncOrRenameInFinishLeavesNoFile) {
  const float values[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  struct Case {
    FsOp op;
    int err;
    std::string says;
  };
  for (const Case& c : {Case{FsOp::kSync, EIO, "fsync " + output_ + ".tmp: Input/output error (EIO)"},
                        Case{FsOp::kRename, EXDEV, "rename " + output_ + ".tmp to " + output_}}) {
    fs_.ClearFaults();
    fs_.FailNth(c.op, 1, c.err);
    auto writer = SafetensorsWriter::Create(fs_, output_, Entries());
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append(values, 10).ok());
    absl::Status finished = (*writer)->Finish();
    EXPECT_FALSE(finished.ok());
    EXPECT_THAT(std::string(finished.message()), HasSubstr(c.says));
    EXPECT_FALSE(Left(output_ + ".tmp")) << c.says;
    EXPECT_FALSE(Left(output_)) << c.says;
    // Finished (badly) once: nothing more is taken.
    EXPECT_EQ((*writer)->Append(values, 1).code(), absl::StatusCode::kFailedPrecondition);
  }
}

TEST_F(SafetensorsWriterTest, TooFewOrMisplacedValuesAreRefused) {
  const float values[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  auto writer = SafetensorsWriter::Create(fs_, output_, Entries());
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ((*writer)->WriteAt(8, values, 3).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*writer)->Append(values, 11).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*writer)->Append(values, 9).ok());
  absl::Status short_by_one = (*writer)->Finish();
  EXPECT_EQ(short_by_one.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(short_by_one.message()), HasSubstr("wrote 9 of 10 values"));
  writer->reset();
  EXPECT_FALSE(Left(output_ + ".tmp"));
  EXPECT_FALSE(Left(output_));
}

}  // namespace
}  // namespace dslaunch::runtime
