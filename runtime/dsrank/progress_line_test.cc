#include "runtime/dsrank/progress_line.h"

#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

TEST(ProgressLine, ClockText) {
  EXPECT_EQ(ClockText(0), "0:00");
  EXPECT_EQ(ClockText(75.4), "1:15");
  EXPECT_EQ(ClockText(3725), "1:02:05");
  EXPECT_EQ(ClockText(-3), "0:00");
}

TEST(ProgressLine, StepTotalElapsedAndEta) {
  // 10 steps in 20 s: 2 s a step, 190 to go.
  EXPECT_EQ(ProgressText(10, 1, 200, 20, "ZeRO-1"), "10/200 (5%) elapsed 0:20 eta 6:20 | ZeRO-1");
  // Resumed at step 101: the rate comes from this attempt's steps only.
  EXPECT_EQ(ProgressText(110, 101, 200, 10, "no ZeRO"), "110/200 (55%) elapsed 0:10 eta 1:30 | no ZeRO");
  EXPECT_EQ(ProgressText(200, 1, 200, 400, "ZeRO-2"), "200/200 (100%) elapsed 6:40 eta 0:00 | ZeRO-2");
  EXPECT_EQ(ProgressText(1, 1, 200, 0, "ZeRO-2"), "1/200 (0%) elapsed 0:00 eta unknown | ZeRO-2");
}

TEST(ProgressLine, OptimizerInUseNamesStageAndOffload) {
  DsConfig ds;
  ds.zero_optimization.stage = 0;
  EXPECT_EQ(OptimizerInUse(ds), "no ZeRO");
  ds.zero_optimization.stage = 3;
  ds.zero_optimization.offload_optimizer.device = "cpu";
  ds.zero_optimization.offload_param.device = "cpu";
  EXPECT_EQ(OptimizerInUse(ds), "ZeRO-3, optimizer offloaded to cpu, parameters offloaded to cpu");
}

}  // namespace
}  // namespace dslaunch::runtime
