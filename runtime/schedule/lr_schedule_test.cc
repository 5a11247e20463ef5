#include "runtime/schedule/lr_schedule.h"

#include <memory>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

// Expected values below are worked out by hand from DeepSpeed's formulas with
// k = optimizer step = last_batch_iteration + 1 (Note [LrAt(k) convention]);
// irrational ones are written to 15+ significant digits.
constexpr double kTol = 1e-12;

std::unique_ptr<LrSchedule> MustMake(const SchedulerConfig& config, double optimizer_lr = 0.5) {
  auto schedule = MakeLrSchedule(config, optimizer_lr);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? std::move(*schedule) : nullptr;
}

absl::Status MakeError(const SchedulerConfig& config, double optimizer_lr = 0.5) {
  auto schedule = MakeLrSchedule(config, optimizer_lr);
  return schedule.ok() ? absl::OkStatus() : schedule.status();
}

TEST(ConstantLr, EmptyTypeKeepsTheOptimizerLr) {
  SchedulerConfig config;
  auto schedule = MustMake(config, 3e-4);
  ASSERT_NE(schedule, nullptr);
  EXPECT_STREQ(schedule->type(), "constant");
  for (int64_t k : {0, 1, 1000, 1000000}) EXPECT_EQ(schedule->LrAt(k), 3e-4);
  EXPECT_EQ(schedule->Beta1At(5), std::nullopt);
  EXPECT_EQ(schedule->Beta2At(5), std::nullopt);
}

TEST(LrRangeTest, Continuous) {
  SchedulerConfig config;
  config.type = "LRRangeTest";
  config.lr_range_test_min_lr = 0.001;
  config.lr_range_test_step_size = 10;
  config.lr_range_test_step_rate = 2;
  auto schedule = MustMake(config);
  ASSERT_NE(schedule, nullptr);
  // lr = 0.001 * (1 + 2 * k / 10)
  EXPECT_NEAR(schedule->LrAt(0), 0.001, kTol);  // the constructor's min_lr
  EXPECT_NEAR(schedule->LrAt(1), 0.0012, kTol);
  EXPECT_NEAR(schedule->LrAt(5), 0.002, kTol);
  EXPECT_NEAR(schedule->LrAt(10), 0.003, kTol);
  EXPECT_NEAR(schedule->LrAt(25), 0.006, kTol);
  EXPECT_EQ(schedule->Beta1At(3), std::nullopt);
}

TEST(LrRangeTest, Staircase) {
  SchedulerConfig config;
  config.type = "LRRangeTest";
  config.lr_range_test_min_lr = 0.001;
  config.lr_range_test_step_size = 10;
  config.lr_range_test_step_rate = 2;
  config.lr_range_test_staircase = true;
  auto schedule = MustMake(config);
  ASSERT_NE(schedule, nullptr);
  // lr = 0.001 * (1 + 2 * floor(k / 10))
  EXPECT_NEAR(schedule->LrAt(0), 0.001, kTol);
  EXPECT_NEAR(schedule->LrAt(9), 0.001, kTol);
  EXPECT_NEAR(schedule->LrAt(10), 0.003, kTol);
  EXPECT_NEAR(schedule->LrAt(19), 0.003, kTol);
  EXPECT_NEAR(schedule->LrAt(20), 0.005, kTol);
  EXPECT_NEAR(schedule->LrAt(25), 0.005, kTol);
}

SchedulerConfig OneCycleConfig() {
  SchedulerConfig config;
  config.type = "OneCycle";
  config.cycle_min_lr = 0.01;
  config.cycle_max_lr = 0.1;
  config.cycle_first_step_size = 10;
  config.cycle_second_step_size = -1;  // same as first: total 20
  config.decay_step_size = 5;
  config.decay_lr_rate = 0.5;
  config.cycle_momentum = true;
  config.cycle_min_mom = 0.8;
  config.cycle_max_mom = 0.9;
  config.decay_mom_rate = 0.1;
  return config;
}

TEST(OneCycle, SymmetricCycleThenDecay) {
  auto schedule = MustMake(OneCycleConfig());
  ASSERT_NE(schedule, nullptr);
  // Cycle (k <= 20): x = k/20, scale = x/0.5 up to the peak, (x-1)/(0.5-1) after.
  EXPECT_NEAR(schedule->LrAt(0), 0.01, kTol);
  EXPECT_NEAR(schedule->LrAt(1), 0.019, kTol);   // scale 0.1
  EXPECT_NEAR(schedule->LrAt(5), 0.055, kTol);   // scale 0.5
  EXPECT_NEAR(schedule->LrAt(10), 0.1, kTol);    // peak
  EXPECT_NEAR(schedule->LrAt(15), 0.055, kTol);  // scale (0.75-1)/(-0.5) = 0.5
  EXPECT_NEAR(schedule->LrAt(20), 0.01, kTol);   // last_batch_iteration 19: still the cycle
  // Decay: d = k - 20, lr = 0.01 / (1 + 0.5 * d / 5).
  EXPECT_NEAR(schedule->LrAt(21), 0.00909090909090909, kTol);
  EXPECT_NEAR(schedule->LrAt(25), 0.00666666666666667, kTol);
  EXPECT_NEAR(schedule->LrAt(30), 0.005, kTol);
}

TEST(OneCycle, MomentumCyclesInverselyAndOverridesBeta2) {
  auto schedule = MustMake(OneCycleConfig());
  ASSERT_NE(schedule, nullptr);
  // Step 0: DeepSpeed's constructor writes (cycle_min_mom, 0.99).
  EXPECT_THAT(schedule->Beta1At(0), Optional(testing::DoubleNear(0.8, kTol)));
  // Cycle: mom = 0.9 - 0.1 * scale.
  EXPECT_THAT(schedule->Beta1At(1), Optional(testing::DoubleNear(0.89, kTol)));
  EXPECT_THAT(schedule->Beta1At(5), Optional(testing::DoubleNear(0.85, kTol)));
  EXPECT_THAT(schedule->Beta1At(10), Optional(testing::DoubleNear(0.8, kTol)));
  EXPECT_THAT(schedule->Beta1At(15), Optional(testing::DoubleNear(0.85, kTol)));
  EXPECT_THAT(schedule->Beta1At(20), Optional(testing::DoubleNear(0.9, kTol)));
  // Decay: mom = 0.9 * (1 + 0.1 * d / 5).
  EXPECT_THAT(schedule->Beta1At(21), Optional(testing::DoubleNear(0.918, kTol)));
  EXPECT_THAT(schedule->Beta1At(25), Optional(testing::DoubleNear(0.99, kTol)));
  for (int64_t k : {0, 7, 30}) EXPECT_THAT(schedule->Beta2At(k), Optional(0.99));
}

TEST(OneCycle, AsymmetricCycleWithoutDecayOrMomentum) {
  SchedulerConfig config;
  config.type = "OneCycle";
  config.cycle_min_lr = 0;
  config.cycle_max_lr = 1;
  config.cycle_first_step_size = 4;
  config.cycle_second_step_size = 12;  // total 16, step ratio 0.25
  config.decay_step_size = 0;          // no decay: hold cycle_min_lr
  config.decay_lr_rate = 0.5;
  config.cycle_momentum = false;
  auto schedule = MustMake(config);
  ASSERT_NE(schedule, nullptr);
  EXPECT_NEAR(schedule->LrAt(2), 0.5, kTol);   // x 0.125 -> 0.125 / 0.25
  EXPECT_NEAR(schedule->LrAt(4), 1.0, kTol);   // peak
  EXPECT_NEAR(schedule->LrAt(10), 0.5, kTol);  // x 0.625 -> 0.375 / 0.75
  EXPECT_NEAR(schedule->LrAt(13), 0.25, kTol); // x 0.8125 -> 0.1875 / 0.75
  EXPECT_NEAR(schedule->LrAt(16), 0.0, kTol);
  EXPECT_NEAR(schedule->LrAt(17), 0.0, kTol);
  EXPECT_NEAR(schedule->LrAt(1000), 0.0, kTol);
  EXPECT_EQ(schedule->Beta1At(2), std::nullopt);
  EXPECT_EQ(schedule->Beta2At(2), std::nullopt);
}

TEST(OneCycle, ZeroDecayRateHoldsMinLrButMomentumStillDecays) {
  SchedulerConfig config = OneCycleConfig();
  config.decay_lr_rate = 0;
  auto schedule = MustMake(config);
  ASSERT_NE(schedule, nullptr);
  EXPECT_NEAR(schedule->LrAt(30), 0.01, kTol);
  EXPECT_THAT(schedule->Beta1At(30), Optional(testing::DoubleNear(1.08, kTol)));  // 0.9 * 1.2
}

TEST(OneCycle, StairCountsDoNotChangeTheCurve) {
  SchedulerConfig plain = OneCycleConfig();
  SchedulerConfig stairs = OneCycleConfig();
  stairs.cycle_first_stair_count = 3;
  stairs.cycle_second_stair_count = -1;
  auto a = MustMake(plain);
  auto b = MustMake(stairs);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (int64_t k = 0; k < 40; ++k) EXPECT_EQ(a->LrAt(k), b->LrAt(k)) << k;
}

SchedulerConfig WarmupConfig(const char* type, const char* warmup_type) {
  SchedulerConfig config;
  config.type = type;
  config.warmup_type = warmup_type;
  config.warmup_num_steps = 10;
  config.warmup_min_lr = 0;
  config.warmup_max_lr = 0.01;
  return config;
}

TEST(WarmupLr, LogWarmup) {
  auto schedule = MustMake(WarmupConfig("WarmupLR", "log"));
  ASSERT_NE(schedule, nullptr);
  // lr = 0.01 * log(k) / log(10) while k - 1 < 10, then 0.01.
  EXPECT_NEAR(schedule->LrAt(0), 0.0, kTol);  // the constructor's warmup_min_lr
  EXPECT_NEAR(schedule->LrAt(1), 0.0, kTol);  // log(1) = 0
  EXPECT_NEAR(schedule->LrAt(5), 0.00698970004336019, kTol);
  EXPECT_NEAR(schedule->LrAt(9), 0.00954242509439325, kTol);
  EXPECT_NEAR(schedule->LrAt(10), 0.01, kTol);
  EXPECT_NEAR(schedule->LrAt(11), 0.01, kTol);
  EXPECT_NEAR(schedule->LrAt(20), 0.01, kTol);
  EXPECT_EQ(schedule->Beta1At(5), std::nullopt);
}

TEST(WarmupLr, LinearWarmupFromNonZeroMin) {
  SchedulerConfig config = WarmupConfig("WarmupLR", "linear");
  config.warmup_min_lr = 0.001;
  config.warmup_max_lr = 0.011;
  auto schedule = MustMake(config);
  ASSERT_NE(schedule, nullptr);
  // lr = 0.001 + 0.01 * (k - 1) / 10 while k - 1 < 10, then 0.011.
  EXPECT_NEAR(schedule->LrAt(0), 0.001, kTol);
  EXPECT_NEAR(schedule->LrAt(1), 0.001, kTol);
  EXPECT_NEAR(schedule->LrAt(5), 0.005, kTol);
  EXPECT_NEAR(schedule->LrAt(10), 0.01, kTol);
  EXPECT_NEAR(schedule->LrAt(11), 0.011, kTol);
  EXPECT_NEAR(schedule->LrAt(20), 0.011, kTol);
}

TEST(WarmupLr, WarmupOfZeroOrOneStepsLastsTwo) {
  SchedulerConfig config = WarmupConfig("WarmupLR", "linear");
  config.warmup_num_steps = 0;  // DeepSpeed: max(2, warmup_num_steps)
  auto schedule = MustMake(config);
  ASSERT_NE(schedule, nullptr);
  EXPECT_NEAR(schedule->LrAt(1), 0.0, kTol);
  EXPECT_NEAR(schedule->LrAt(2), 0.005, kTol);
  EXPECT_NEAR(schedule->LrAt(3), 0.01, kTol);
}

TEST(WarmupDecayLr, LinearWarmupThenLinearDecayToZero) {
  SchedulerConfig config = WarmupConfig("WarmupDecayLR", "linear");
  config.total_num_steps = 110;
  auto schedule = MustMake(config);
  ASSERT_NE(schedule, nullptr);
  EXPECT_STREQ(schedule->type(), "WarmupDecayLR");
  EXPECT_NEAR(schedule->LrAt(0), 0.0, kTol);
  EXPECT_NEAR(schedule->LrAt(10), 0.009, kTol);  // last warmup step: 9 / 10
  // After warmup: 0.01 * (110 - (k - 1)) / 100.
  EXPECT_NEAR(schedule->LrAt(11), 0.01, kTol);     // warmup end: the peak
  EXPECT_NEAR(schedule->LrAt(61), 0.005, kTol);    // midway
  EXPECT_NEAR(schedule->LrAt(110), 0.0001, kTol);  // k = total
  EXPECT_NEAR(schedule->LrAt(111), 0.0, kTol);     // past total: 0
  EXPECT_NEAR(schedule->LrAt(500), 0.0, kTol);
}

TEST(WarmupDecayLr, LogWarmupAndDecayToMinLr) {
  SchedulerConfig config = WarmupConfig("WarmupDecayLR", "log");
  config.warmup_min_lr = 0.001;
  config.warmup_max_lr = 0.011;
  config.total_num_steps = 110;
  auto schedule = MustMake(config);
  ASSERT_NE(schedule, nullptr);
  EXPECT_NEAR(schedule->LrAt(5), 0.001 + 0.00698970004336019, kTol);
  EXPECT_NEAR(schedule->LrAt(10), 0.011, kTol);
  EXPECT_NEAR(schedule->LrAt(61), 0.006, kTol);
  EXPECT_NEAR(schedule->LrAt(1000), 0.001, kTol);  // the decay ends at warmup_min_lr
}

SchedulerConfig CosineConfig(const char* warmup_type) {
  SchedulerConfig config;
  config.type = "WarmupCosineLR";
  config.warmup_type = warmup_type;
  config.warmup_num_steps = 10;
  config.total_num_steps = 110;
  config.warmup_min_ratio = 0.1;
  config.cos_min_ratio = 0.01;
  return config;
}

TEST(WarmupCosineLr, LinearWarmupThenCosineOfTheOptimizerLr) {
  auto schedule = MustMake(CosineConfig("linear"), /*optimizer_lr=*/0.1);
  ASSERT_NE(schedule, nullptr);
  EXPECT_NEAR(schedule->LrAt(0), 0.0, kTol);  // DeepSpeed's constructor writes 0
  // Warmup: ratio = 0.1 + 0.9 * (k - 1) / 10.
  EXPECT_NEAR(schedule->LrAt(1), 0.01, kTol);
  EXPECT_NEAR(schedule->LrAt(6), 0.055, kTol);
  EXPECT_NEAR(schedule->LrAt(10), 0.091, kTol);
  // Cosine: d = k - 10, ratio = 0.01 + 0.99 * (1 + cos(pi * d / 100)) / 2.
  EXPECT_NEAR(schedule->LrAt(35), 0.0855017856687341, kTol);  // d 25: cos(pi/4)
  EXPECT_NEAR(schedule->LrAt(60), 0.0505, kTol);              // d 50: cos(pi/2) = 0
  EXPECT_NEAR(schedule->LrAt(110), 0.001, kTol);              // d 100: cos(pi) = -1
  // Past total_num_steps the lr stays at cos_min_ratio (DeepSpeed's would rise).
  EXPECT_NEAR(schedule->LrAt(111), 0.001, kTol);
  EXPECT_NEAR(schedule->LrAt(200), 0.001, kTol);
}

TEST(WarmupCosineLr, LogWarmup) {
  SchedulerConfig config = CosineConfig("log");
  config.warmup_min_ratio = 0;
  auto schedule = MustMake(config, /*optimizer_lr=*/0.1);
  ASSERT_NE(schedule, nullptr);
  EXPECT_NEAR(schedule->LrAt(1), 0.0, kTol);
  EXPECT_NEAR(schedule->LrAt(5), 0.0698970004336019, kTol);  // 0.1 * log(5) / log(10)
  EXPECT_NEAR(schedule->LrAt(10), 0.1, kTol);
}

TEST(LrSchedule, NegativeStepIsStepZero) {
  auto schedule = MustMake(WarmupConfig("WarmupLR", "linear"));
  ASSERT_NE(schedule, nullptr);
  EXPECT_EQ(schedule->LrAt(-3), schedule->LrAt(0));
}

TEST(MakeLrSchedule, UnknownTypeNamesTheValidOnes) {
  SchedulerConfig config;
  config.type = "CosineAnnealing";
  absl::Status status = MakeError(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("scheduler.type=\"CosineAnnealing\""));
  EXPECT_THAT(status.message(), HasSubstr("WarmupCosineLR"));
}

TEST(MakeLrSchedule, WarmupDecayNeedsTotalAfterWarmup) {
  SchedulerConfig config = WarmupConfig("WarmupDecayLR", "log");
  config.warmup_num_steps = 100;
  config.total_num_steps = 100;
  absl::Status status = MakeError(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("scheduler.params.total_num_steps=100: must be greater than "
                        "warmup_num_steps=100"));

  config.total_num_steps = 0;  // the default: never set
  EXPECT_THAT(MakeError(config).message(), HasSubstr("total_num_steps=0"));
}

TEST(MakeLrSchedule, CosineNeedsTotalAfterWarmupAndRatios) {
  SchedulerConfig config = CosineConfig("linear");
  config.total_num_steps = 5;
  config.cos_min_ratio = 1.5;
  absl::Status status = MakeError(config);
  EXPECT_THAT(status.message(), HasSubstr("scheduler.params.total_num_steps=5"));
  EXPECT_THAT(status.message(), HasSubstr("scheduler.params.cos_min_ratio=1.5: must be in [0, 1]"));
}

TEST(MakeLrSchedule, ReportsEveryProblemAtOnce) {
  SchedulerConfig config;
  config.type = "OneCycle";
  config.cycle_max_lr = 0;
  config.cycle_first_step_size = 0;
  config.cycle_second_step_size = -7;
  config.decay_step_size = -1;
  absl::Status status = MakeError(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("scheduler.params.cycle_max_lr=0"));
  EXPECT_THAT(status.message(), HasSubstr("scheduler.params.cycle_first_step_size=0"));
  EXPECT_THAT(status.message(), HasSubstr("scheduler.params.cycle_second_step_size=-7"));
  EXPECT_THAT(status.message(), HasSubstr("scheduler.params.decay_step_size=-1"));
}

TEST(MakeLrSchedule, RejectsBadWarmupTypeAndRangeTestStepSize) {
  SchedulerConfig warmup = WarmupConfig("WarmupLR", "exp");
  EXPECT_THAT(MakeError(warmup).message(), HasSubstr("scheduler.params.warmup_type=\"exp\""));

  SchedulerConfig range;
  range.type = "LRRangeTest";
  range.lr_range_test_step_size = 0;
  EXPECT_THAT(MakeError(range).message(), HasSubstr("scheduler.params.lr_range_test_step_size=0"));
}

TEST(MakeLrSchedule, RejectsNegativeOptimizerLr) {
  SchedulerConfig config;
  EXPECT_THAT(MakeError(config, -1).message(), HasSubstr("optimizer.params.lr=-1"));
}

}  // namespace
}  // namespace dslaunch::runtime
