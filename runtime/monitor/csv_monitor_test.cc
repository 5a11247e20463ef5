#include "runtime/monitor/csv_monitor.h"

#include <cmath>
#include <string>

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

std::string Read(const std::string& path) {
  auto text = FileSystem::Default().ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

TEST(CsvMonitorTest, FileNamesAndValuesAreDeepSpeeds) {
  EXPECT_EQ(CsvMonitorFileName("Train/Samples/train_loss"), "Train_Samples_train_loss.csv");
  EXPECT_EQ(CsvMonitorFileName("my metric/a b"), "my_metric_a_b.csv");
  EXPECT_EQ(ShortestDouble(0.1), "0.1");
  EXPECT_EQ(ShortestDouble(6e-4), "0.0006");
  EXPECT_EQ(ShortestDouble(2.3456789e-05), "2.3456789e-05");
  EXPECT_EQ(ShortestDouble(3.0), "3.0");
  EXPECT_EQ(ShortestDouble(-250.0), "-250.0");
  EXPECT_EQ(ShortestDouble(123.456), "123.456");
  EXPECT_EQ(ShortestDouble(1e16), "1e+16");
  EXPECT_EQ(ShortestDouble(1.5e-7), "1.5e-07");
  EXPECT_EQ(ShortestDouble(-1.25e100), "-1.25e+100");
  EXPECT_EQ(ShortestDouble(0.0), "0.0");
  EXPECT_EQ(ShortestDouble(NAN), "nan");
  EXPECT_EQ(ShortestDouble(-INFINITY), "-inf");
  // Shortest, yet exact: it reads back as the same double.
  const double third = 1.0 / 3.0;
  EXPECT_EQ(std::stod(ShortestDouble(third)), third);
}

TEST(CsvMonitorTest, OneFilePerMetricWithAHeaderFromTheNamesLastPart) {
  TestTempDir dir;
  CsvMonitor csv(FileSystem::Default(), dir.path(), 0);
  ASSERT_TRUE(csv.Write({{"Train/Samples/train_loss", 2.5, 16}, {"Train/Samples/lr", 0.0006, 16}}).ok());
  ASSERT_TRUE(csv.Write({{"Train/Samples/train_loss", 2.25, 32}}).ok());
  ASSERT_TRUE(csv.Flush().ok());
  EXPECT_EQ(Read(dir.File("Train_Samples_train_loss.csv")), "step,train_loss\n16,2.5\n32,2.25\n");
  EXPECT_EQ(Read(dir.File("Train_Samples_lr.csv")), "step,lr\n16,0.0006\n");
}

// A restarted job: rows after the step it resumes after are replaced, the
// header is not repeated (DeepSpeed repeats both).
TEST(CsvMonitorTest, ARestartKeepsTheRowsItResumesAfterAndOneHeader) {
  TestTempDir dir;
  dir.Write("Train_Samples_train_loss.csv", "step,train_loss\n16,2.5\n32,2.25\n48,2.0\n64,1.9\n");
  CsvMonitor csv(FileSystem::Default(), dir.path(), /*resume_after=*/32);
  ASSERT_TRUE(csv.Write({{"Train/Samples/train_loss", 2.1, 48}}).ok());
  ASSERT_TRUE(csv.Flush().ok());
  EXPECT_EQ(Read(dir.File("Train_Samples_train_loss.csv")), "step,train_loss\n16,2.5\n32,2.25\n48,2.1\n");

  // A fresh start (resume_after 0) into the same folder replaces every row.
  CsvMonitor fresh(FileSystem::Default(), dir.path(), 0);
  ASSERT_TRUE(fresh.Write({{"Train/Samples/train_loss", 3.0, 16}}).ok());
  ASSERT_TRUE(fresh.Flush().ok());
  EXPECT_EQ(Read(dir.File("Train_Samples_train_loss.csv")), "step,train_loss\n16,3.0\n");
}

TEST(CsvMonitorTest, AFileThatIsNotACsvMonitorFileIsRefusedNamingIt) {
  TestTempDir dir;
  const std::string path = dir.Write("Train_Samples_lr.csv", "step,lr\n16,0.1\nsomething else\n");
  CsvMonitor csv(FileSystem::Default(), dir.path(), 8);
  absl::Status written = csv.Write({{"Train/Samples/lr", 0.2, 16}});
  EXPECT_EQ(written.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(written.message()), HasSubstr(path + ": line \"something else\""));
  EXPECT_EQ(Read(path), "step,lr\n16,0.1\nsomething else\n");  // left as it was
}

}  // namespace
}  // namespace dslaunch::runtime
