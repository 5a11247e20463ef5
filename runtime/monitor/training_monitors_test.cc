#include "runtime/monitor/training_monitors.h"

#include <string>

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

MonitorConfig Monitor(std::string output_path, std::string job_name) {
  MonitorConfig m;
  m.enabled = true;
  m.output_path = std::move(output_path);
  m.job_name = std::move(job_name);
  return m;
}

// As os.path.join(output_path, job_name), which DeepSpeed uses.
TEST(TrainingMonitorsTest, FolderJoinsOutputPathAndJobNameAsDeepSpeedDoes) {
  EXPECT_EQ(MonitorFolder(Monitor("", "DeepSpeedJobName")), "DeepSpeedJobName");
  EXPECT_EQ(MonitorFolder(Monitor("runs", "gpt")), "runs/gpt");
  EXPECT_EQ(MonitorFolder(Monitor("runs/", "gpt")), "runs/gpt");
  EXPECT_EQ(MonitorFolder(Monitor("/", "gpt")), "/gpt");
  EXPECT_EQ(MonitorFolder(Monitor("runs", "/abs/gpt")), "/abs/gpt");
  EXPECT_EQ(MonitorFolder(Monitor("runs", "")), "runs");
}

TEST(TrainingMonitorsTest, NothingEnabledOpensNothing) {
  auto monitors = TrainingMonitors::Open(DsConfig{}, FileSystem::Default(), MonitorStart{});
  ASSERT_TRUE(monitors.ok()) << monitors.status();
  EXPECT_EQ(*monitors, nullptr);
}

TEST(TrainingMonitorsTest, BothMonitorsGetEveryEvent) {
  TestTempDir dir;
  DsConfig ds;
  ds.tensorboard = Monitor(dir.path(), "tb/job");
  ds.csv_monitor = Monitor(dir.path(), "csv");
  auto monitors = TrainingMonitors::Open(ds, FileSystem::Default(), MonitorStart{0, "", "host", 9, 100.0});
  ASSERT_TRUE(monitors.ok()) << monitors.status();
  ASSERT_NE(*monitors, nullptr);
  EXPECT_THAT((*monitors)->Describe(),
              ElementsAre(StartsWith("tensorboard: " + dir.path() + "/tb/job/events.out.tfevents.0000000100.host.9.0"),
                          "csv_monitor: " + dir.path() + "/csv/<metric>.csv"));
  ASSERT_TRUE((*monitors)
                  ->Write({{monitor_metric::kTrainLoss, 2.0, 8},
                           {monitor_metric::kLearningRate, 0.001, 8},
                           {monitor_metric::kEvalLoss, 2.5, 8},
                           {monitor_metric::kTrainLoss, 1.5, 16}},
                          101.0)
                  .ok());
  auto csv = FileSystem::Default().ReadFile(dir.File("csv/Train_Samples_train_loss.csv"));
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_EQ(*csv, "step,train_loss\n8,2.0\n16,1.5\n");
  auto eval = FileSystem::Default().ReadFile(dir.File("csv/Eval_Samples_eval_loss.csv"));
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(*eval, "step,eval_loss\n8,2.5\n");
  auto events = FileSystem::Default().ReadFile(dir.File("tb/job/events.out.tfevents.0000000100.host.9.0"));
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_THAT(*events, HasSubstr("brain.Event:2"));
  EXPECT_THAT(*events, HasSubstr(monitor_metric::kEvalLoss));
}

TEST(TrainingMonitorsTest, RelativeFoldersAreInTheJobFilesFolder) {
  TestTempDir dir;
  DsConfig ds;
  ds.csv_monitor = Monitor("runs", "csv");
  ds.tensorboard = Monitor("", "/" + dir.path().substr(1) + "/tb");  // absolute: kept
  auto monitors = TrainingMonitors::Open(ds, FileSystem::Default(), MonitorStart{0, dir.path(), "h", 1, 5.0});
  ASSERT_TRUE(monitors.ok()) << monitors.status();
  EXPECT_THAT((*monitors)->Describe(),
              ElementsAre(StartsWith("tensorboard: " + dir.path() + "/tb/events.out.tfevents."),
                          "csv_monitor: " + dir.path() + "/runs/csv/<metric>.csv"));
}

TEST(TrainingMonitorsTest, AFolderThatCannotBeMadeIsAnErrorNamingIt) {
  TestTempDir dir;
  const std::string blocker = dir.Write("file", "x");
  DsConfig ds;
  ds.csv_monitor = Monitor(blocker, "csv");
  auto monitors = TrainingMonitors::Open(ds, FileSystem::Default(), MonitorStart{});
  EXPECT_FALSE(monitors.ok());
  EXPECT_THAT(std::string(monitors.status().message()), HasSubstr(blocker));
}

}  // namespace
}  // namespace dslaunch::runtime
