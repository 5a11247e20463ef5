#include "runtime/schedule/loss_scaler.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

Fp16Config Dynamic(int initial_scale_power, int hysteresis, int window, double min_scale = 1,
                   bool consecutive = false) {
  Fp16Config config;
  config.enabled = true;
  config.loss_scale = 0;
  config.initial_scale_power = initial_scale_power;
  config.hysteresis = hysteresis;
  config.loss_scale_window = window;
  config.min_loss_scale = min_scale;
  config.consecutive_hysteresis = consecutive;
  return config;
}

constexpr bool O = true;   // overflow
constexpr bool C = false;  // clean

struct Expected {
  bool overflow;
  double scale_after;
  int hysteresis_after;
};

// Applies the script and checks the scale and hysteresis after every Update.
void RunScript(LossScaler& scaler, const std::vector<Expected>& script) {
  for (size_t i = 0; i < script.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "update " << i);
    EXPECT_EQ(scaler.Update(script[i].overflow), script[i].overflow);
    EXPECT_EQ(scaler.scale(), script[i].scale_after);
    EXPECT_EQ(scaler.state().hysteresis, script[i].hysteresis_after);
  }
}

TEST(LossScaler, DefaultsStartAt2To16) {
  Fp16Config config;
  config.enabled = true;
  auto scaler = LossScaler::Create(config);
  ASSERT_TRUE(scaler.ok()) << scaler.status();
  EXPECT_TRUE(scaler->dynamic());
  EXPECT_EQ(scaler->scale(), 65536.0);
  EXPECT_EQ(scaler->state().hysteresis, 2);
  EXPECT_EQ(scaler->state().last_overflow_iteration, -1);
}

// hysteresis 2, window 4, start 16. Worked by hand from update_scale:
// the scale doubles on a clean update when (iteration - last_overflow) % 4 == 0
// (iteration counted before the increment, last_overflow starting at -1).
TEST(LossScaler, HysteresisTwoWindowFour) {
  LossScaler scaler(Dynamic(4, 2, 4));
  ASSERT_EQ(scaler.scale(), 16);
  RunScript(scaler, {
                        {C, 16, 2},  // it 0: 0 - (-1) = 1
                        {C, 16, 2},  // it 1
                        {C, 16, 2},  // it 2
                        {C, 32, 2},  // it 3: 4 % 4 == 0 -> x2
                        {O, 32, 1},  // it 4: hysteresis 2 -> 1, scale kept; last overflow 4
                        {C, 32, 1},  // it 5: not refilled (consecutive_hysteresis off)
                        {O, 16, 1},  // it 6: hysteresis 1 -> halve; last overflow 6
                        {O, 8, 1},   // it 7: halve again; last overflow 7
                        {C, 8, 1},   // it 8: 1
                        {C, 8, 1},   // it 9: 2
                        {C, 8, 1},   // it 10: 3
                        {C, 16, 2},  // it 11: 4 -> x2, hysteresis refilled
                        {O, 16, 1},  // it 12: absorbed by hysteresis, window restarts
                        {C, 16, 1},  // it 13
                        {C, 16, 1},  // it 14
                        {C, 16, 1},  // it 15
                        {C, 32, 2},  // it 16: 16 - 12 = 4 -> x2
                        {C, 32, 2},  // it 17
                        {C, 32, 2},  // it 18
                        {C, 32, 2},  // it 19
                        {C, 64, 2},  // it 20: 8 -> x2 again, every window
                    });
  EXPECT_EQ(scaler.skipped_steps(), 4);
  EXPECT_EQ(scaler.state().iteration, 21);
  EXPECT_EQ(scaler.state().last_overflow_iteration, 12);
  EXPECT_EQ(scaler.overflows_at_min_scale(), 0);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  LossScaler scaler(Dynamic(4, 2, 4, 1, /*consecutive=*/true));
  RunScript(scaler, {
                        {C, 16, 2},
                        {C, 16, 2},
                        {C, 16, 2},
                        {C, 32, 2},  // it 3
                        {O, 32, 1},  // it 4
                        {C, 32, 2},  // it 5: refilled
                        {O, 32, 1},  // it 6: absorbed again
                        {O, 16, 1},  // it 7: two in a row -> halve
                        {C, 16, 2},  // it 8
                        {C, 16, 2},  // it 9
                        {C, 16, 2},  // it 10
                        {C, 32, 2},  // it 11: 11 - 7 = 4
                    });
  EXPECT_EQ(scaler.skipped_steps(), 3);
}

TEST(LossScaler, HysteresisOneHalvesOnEveryOverflow) {
  LossScaler scaler(Dynamic(3, 1, 2));
  RunScript(scaler, {
                        {O, 4, 1},  // it 0
                        {C, 4, 1},  // it 1: 1
                        {C, 8, 1},  // it 2: 2 % 2 == 0
                        {C, 8, 1},  // it 3
                        {C, 16, 1}, // it 4
                        {O, 8, 1},  // it 5
                    });
}

TEST(LossScaler, MinScaleIsAFloorNotAnAbort) {
  LossScaler scaler(Dynamic(2, 1, 1000));
  RunScript(scaler, {
                        {O, 2, 1},
                        {O, 1, 1},  // reaches min_loss_scale
                        {O, 1, 1},  // DeepSpeed would raise here
                        {O, 1, 1},
                    });
  EXPECT_TRUE(scaler.at_min_scale());
  EXPECT_EQ(scaler.overflows_at_min_scale(), 2);
  EXPECT_EQ(scaler.skipped_steps(), 4);
}

TEST(LossScaler, MinScaleThatIsNotAPowerOfTwo) {
  LossScaler scaler(Dynamic(2, 1, 1000, /*min_scale=*/3));
  EXPECT_TRUE(scaler.Update(O));
  EXPECT_EQ(scaler.scale(), 3);  // max(4 / 2, 3)
  EXPECT_EQ(scaler.overflows_at_min_scale(), 0);
  EXPECT_TRUE(scaler.Update(O));
  EXPECT_EQ(scaler.scale(), 3);
  EXPECT_EQ(scaler.overflows_at_min_scale(), 1);
}

TEST(LossScaler, MinScaleWithHysteresisLeftIsNotCounted) {
  LossScaler scaler(Dynamic(0, 2, 1000));  // starts at the minimum, 1
  scaler.Update(O);                        // absorbed by hysteresis
  EXPECT_EQ(scaler.overflows_at_min_scale(), 0);
  scaler.Update(O);
  EXPECT_EQ(scaler.overflows_at_min_scale(), 1);
  EXPECT_EQ(scaler.scale(), 1);
}

TEST(LossScaler, StaticScaleNeverChangesButOverflowStillSkips) {
  Fp16Config config;
  config.enabled = true;
  config.loss_scale = 128;
  LossScaler scaler(config);
  EXPECT_FALSE(scaler.dynamic());
  for (int i = 0; i < 3000; ++i) {
    EXPECT_EQ(scaler.Update(i % 7 == 0), i % 7 == 0);
    ASSERT_EQ(scaler.scale(), 128);
  }
  EXPECT_EQ(scaler.skipped_steps(), 429);  // i = 0, 7, ..., 2996
  EXPECT_EQ(scaler.state().iteration, 3000);
  EXPECT_FALSE(scaler.at_min_scale());
}

TEST(LossScaler, DisabledFp16IsAStaticScaleOfOne) {
  Fp16Config config;  // enabled = false; other values ignored
  config.loss_scale_window = -5;
  auto scaler = LossScaler::Create(config);
  ASSERT_TRUE(scaler.ok()) << scaler.status();
  EXPECT_FALSE(scaler->dynamic());
  EXPECT_EQ(scaler->scale(), 1);
  scaler->Update(false);
  EXPECT_EQ(scaler->scale(), 1);
}

TEST(LossScaler, StateRoundTripContinuesIdentically) {
  const Fp16Config config = Dynamic(5, 3, 3);
  const std::vector<bool> before = {C, O, C, O, O, C, C, C, C, O};
  const std::vector<bool> after = {C, C, O, O, O, O, C, C, C, C, C, C, C};
  LossScaler original(config);
  for (bool overflow : before) original.Update(overflow);
  const LossScaler::State saved = original.state();

  LossScaler resumed(config);
  resumed.Restore(saved);
  EXPECT_EQ(resumed.state(), saved);
  for (bool overflow : after) {
    EXPECT_EQ(resumed.Update(overflow), original.Update(overflow));
    EXPECT_EQ(resumed.state(), original.state());
  }
}

TEST(LossScaler, StaticRestoreKeepsTheConfiguredScale) {
  Fp16Config config;
  config.enabled = true;
  config.loss_scale = 64;
  LossScaler scaler(config);
  LossScaler::State state;
  state.scale = 8;
  state.iteration = 10;
  state.skipped_steps = 2;
  scaler.Restore(state);
  EXPECT_EQ(scaler.scale(), 64);
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_EQ(scaler.state().iteration, 10);
}

TEST(LossScaler, ValidateNamesEveryBadKey) {
  Fp16Config config = Dynamic(2000, 0, 0, 0);
  absl::Status status = LossScaler::Validate(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("fp16.initial_scale_power=2000"));
  EXPECT_THAT(status.message(), HasSubstr("fp16.hysteresis=0"));
  EXPECT_THAT(status.message(), HasSubstr("fp16.loss_scale_window=0"));
  EXPECT_THAT(status.message(), HasSubstr("fp16.min_loss_scale=0"));

  Fp16Config negative;
  negative.enabled = true;
  negative.loss_scale = -1;
  EXPECT_THAT(LossScaler::Create(negative).status().message(), HasSubstr("fp16.loss_scale=-1"));
}

}  // namespace
}  // namespace dslaunch::runtime
