// The event file read back record by record: the framing and its CRCs
// checked here, the events parsed with the generated messages. An
// independent reader (tests/monitor/read_tfevents.py, written from the
// format) reads the files of a real job in tests/integration/test_monitors.sh.
#include "runtime/monitor/tensorboard_event_file.h"

#include <cstring>
#include <string>
#include <vector>

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/tensorboard_event.pb.h"
#include "runtime/fs/fault_injecting_file_system.h"
#include "runtime/monitor/crc32c.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

uint64_t LittleEndian(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[at + i]);
  return value;
}

// Every record's data, each CRC checked.
std::vector<std::string> Records(const std::string& file) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < file.size()) {
    EXPECT_LE(at + 12, file.size());
    const uint64_t length = LittleEndian(file, at, 8);
    EXPECT_EQ(LittleEndian(file, at + 8, 4), MaskedCrc32c(file.substr(at, 8))) << "length CRC at " << at;
    const std::string data = file.substr(at + 12, length);
    EXPECT_EQ(LittleEndian(file, at + 12 + length, 4), MaskedCrc32c(data)) << "data CRC at " << at;
    records.push_back(data);
    at += 12 + length + 4;
  }
  EXPECT_EQ(at, file.size());
  return records;
}

TEST(TensorBoardEventFileTest, RecordFramingIsLengthCrcDataCrc) {
  const std::string record = TfRecord("abc");
  ASSERT_EQ(record.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(LittleEndian(record, 0, 8), 3u);
  EXPECT_EQ(LittleEndian(record, 8, 4), MaskedCrc32c(record.substr(0, 8)));
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(LittleEndian(record, 15, 4), MaskedCrc32c("abc"));
}

TEST(TensorBoardEventFileTest, NameIsWhatTensorBoardGlobsFor) {
  EXPECT_EQ(TensorBoardEventFileName(1764000000.7, "node-3", 4242), "events.out.tfevents.1764000000.node-3.4242.0");
  EXPECT_THAT(TensorBoardEventFileName(12, "h", 1), MatchesRegex("events\\.out\\.tfevents\\.0000000012\\.h\\.1\\.0"));
}

TEST(TensorBoardEventFileTest, WritesVersionStartAndOneEventPerStep) {
  TestTempDir dir;
  auto file = TensorBoardEventFile::Create(FileSystem::Default(), dir.path(), "host", 7, 1000.0);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->WriteStart(5, 1000.5).ok());
  ASSERT_TRUE((*file)->WriteScalars(32, 1001.25, {{"Train/Samples/train_loss", 2.5}, {"Train/Samples/lr", 6e-4}}).ok());
  ASSERT_TRUE((*file)->WriteScalars(64, 1002.0, {{"Train/Samples/train_loss", 2.25}}).ok());
  ASSERT_TRUE((*file)->Flush().ok());
  EXPECT_EQ((*file)->path(), dir.path() + "/events.out.tfevents.0000001000.host.7.0");

  auto bytes = FileSystem::Default().ReadFile((*file)->path());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::vector<std::string> records = Records(*bytes);
  ASSERT_EQ(records.size(), 4u);
  std::vector<tensorboard::Event> events(records.size());
  for (size_t i = 0; i < records.size(); ++i) ASSERT_TRUE(events[i].ParseFromString(records[i])) << i;
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[0].wall_time(), 1000.0);
  EXPECT_EQ(events[1].session_log().status(), tensorboard::SessionLog::START);
  EXPECT_EQ(events[1].step(), 5);
  EXPECT_EQ(events[2].step(), 32);
  EXPECT_EQ(events[2].wall_time(), 1001.25);
  ASSERT_EQ(events[2].summary().value_size(), 2);
  EXPECT_EQ(events[2].summary().value(0).tag(), "Train/Samples/train_loss");
  EXPECT_EQ(events[2].summary().value(0).simple_value(), 2.5f);
  EXPECT_EQ(events[2].summary().value(1).tag(), "Train/Samples/lr");
  EXPECT_EQ(events[2].summary().value(1).simple_value(), 6e-4f);
  EXPECT_EQ(events[3].step(), 64);
  EXPECT_EQ(events[3].summary().value(0).simple_value(), 2.25f);
}

TEST(TensorBoardEventFileTest, AFailedWriteNamesTheFile) {
  TestTempDir dir;
  FaultInjectingFileSystem fs(FileSystem::Default());
  fs.FailNth(FsOp::kAppend, 3, ENOSPC, "tfevents");  // after the version record and its flush
  auto file = TensorBoardEventFile::Create(fs, dir.path(), "host", 7, 1000.0);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::Status started = (*file)->WriteStart(1, 1000.0);
  EXPECT_EQ(started.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(started.message()), HasSubstr(dir.path() + "/events.out.tfevents."));
}

}  // namespace
}  // namespace dslaunch::runtime
