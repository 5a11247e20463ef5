#include "runtime/monitor/tensorboard_event_reader.h"

#include <fstream>
#include <string>
#include <vector>

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fs/file_system.h"
#include "runtime/monitor/tensorboard_event_file.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

std::vector<int64_t> Steps(const std::vector<ScalarPoint>& points) {
  std::vector<int64_t> steps;
  for (const ScalarPoint& point : points) steps.push_back(point.step);
  return steps;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Two attempts: the second resumes at step 64, so what the first logged at 64
// and after (it died after logging 96) is replaced, as TensorBoard shows it.
TEST(TensorBoardEventReader, ReadsTheScalarsOfEveryAttemptWithResumesPurged) {
  TestTempDir dir;
  std::vector<std::string> files;
  {
    auto first = TensorBoardEventFile::Create(FileSystem::Default(), dir.path(), "h", 1, 1000.0);
    ASSERT_TRUE(first.ok()) << first.status();
    for (int64_t step : {32, 64, 96}) {
      ASSERT_TRUE((*first)->WriteScalars(step, 1000.0 + step, {{"loss", 3.0 - step / 100.0}, {"lr", 1e-3}}).ok());
    }
    ASSERT_TRUE((*first)->Close().ok());
    files.push_back((*first)->path());
    auto second = TensorBoardEventFile::Create(FileSystem::Default(), dir.path(), "h", 2, 2000.0);
    ASSERT_TRUE(second.ok()) << second.status();
    ASSERT_TRUE((*second)->WriteStart(64, 2000.0).ok());
    for (int64_t step : {64, 96, 128}) ASSERT_TRUE((*second)->WriteScalars(step, 2000.0 + step, {{"loss", 1.5}}).ok());
    ASSERT_TRUE((*second)->Close().ok());
    files.push_back((*second)->path());
  }
  auto scalars = ReadTensorBoardScalars(files);
  ASSERT_TRUE(scalars.ok()) << scalars.status();
  EXPECT_EQ(scalars->files, 2);
  EXPECT_EQ(scalars->torn_records, 0);
  ASSERT_EQ(scalars->by_tag.count("loss"), 1u);
  EXPECT_THAT(Steps(scalars->by_tag["loss"]), ::testing::ElementsAre(32, 64, 96, 128));
  EXPECT_FLOAT_EQ(scalars->by_tag["loss"][0].value, 2.68f);
  EXPECT_EQ(scalars->by_tag["loss"][1].value, 1.5);  // the second attempt's
  EXPECT_EQ(scalars->by_tag["loss"][1].wall_time, 2064.0);
  EXPECT_THAT(Steps(scalars->by_tag["lr"]), ::testing::ElementsAre(32));  // the rest purged, not re-logged
}

TEST(TensorBoardEventReader, ATornLastRecordEndsTheFileAndACorruptOneIsAnError) {
  TestTempDir dir;
  auto file = TensorBoardEventFile::Create(FileSystem::Default(), dir.path(), "h", 1, 1000.0);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->WriteScalars(1, 1001.0, {{"loss", 2.0}}).ok());
  ASSERT_TRUE((*file)->WriteScalars(2, 1002.0, {{"loss", 1.0}}).ok());
  ASSERT_TRUE((*file)->Close().ok());
  const std::string path = (*file)->path();
  const std::string whole = ReadAll(path);

  WriteAll(path, whole.substr(0, whole.size() - 3));  // killed while writing step 2
  auto torn = ReadTensorBoardScalars({path});
  ASSERT_TRUE(torn.ok()) << torn.status();
  EXPECT_EQ(torn->torn_records, 1);
  EXPECT_THAT(Steps(torn->by_tag["loss"]), ::testing::ElementsAre(1));

  std::string corrupt = whole;
  corrupt[corrupt.size() - 6] ^= 0x40;  // a bit of step 2's data
  WriteAll(path, corrupt);
  auto bad = ReadTensorBoardScalars({path});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(path + ": the record at byte"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("fails its CRC"));
}

}  // namespace
}  // namespace dslaunch::runtime
