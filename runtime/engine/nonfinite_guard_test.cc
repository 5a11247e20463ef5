// Note [Non-finite guard]: a step whose loss (on any rank) or gradient norm
// is not finite is skipped on every rank, in every precision and ZeRO stage,
// and a checkpoint is never written from non-finite values (that test:
// runtime/checkpoint/engine_checkpointer_test.cc).
#include <unistd.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/engine/engine.h"
#include "runtime/model/gpt.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime {
namespace {

using testing::Batch;
using testing::MaxDifference;
using testing::Parameters;
using testing::TinyGpt;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

DsConfig Config(int stage, bool bf16, int dp) {
  DsConfig config;
  config.zero_optimization.stage = stage;
  config.train_micro_batch_size_per_gpu = 4 / dp;
  config.gradient_accumulation_steps = 2;
  config.train_batch_size = 8;
  config.optimizer.type = "AdamW";
  config.optimizer.lr = 1e-2;
  config.zero_optimization.reduce_bucket_size = 1000;
  config.zero_optimization.stage3_param_persistence_threshold = 0;
  config.bf16.enabled = bf16;
  return config;
}

enum class Poison { kNone, kConstantInLoss, kTimesLoss };

// One step of two micro-batches; `poison` spoils the second micro-batch's
// loss on `poisoned_rank` only.
StepResult TrainStep(Engine& engine, Gpt& model, int step, int dp, int rank, Poison poison, int poisoned_rank) {
  const int64_t micro = 4 / dp;
  StepResult result;
  for (int m = 0; m < 2; ++m) {
    auto [inputs, targets] = Batch(step * 8 + m * 4 + rank * micro, micro);
    torch::Tensor loss = model->Loss(inputs.to(engine.device()), targets.to(engine.device()));
    if (m == 1 && rank == poisoned_rank) {
      // A constant NaN spoils the loss but not the gradient; a NaN factor
      // spoils both.
      if (poison == Poison::kConstantInLoss) loss = loss + torch::full({}, kNaN, loss.options());
      if (poison == Poison::kTimesLoss) loss = loss * kNaN;
    }
    EXPECT_TRUE(engine.Backward(loss).ok());
    auto stepped = engine.Step();
    EXPECT_TRUE(stepped.ok()) << stepped.status();
    if (stepped.ok()) result = *stepped;
  }
  return result;
}

std::vector<torch::Tensor> Gathered(Engine& engine, Gpt& model) {
  EXPECT_TRUE(engine.GatherFullParameters().ok());
  return Parameters(model);
}

class NonFiniteGuardTest : public ::testing::Test {
 protected:
  testing::InProcessStore store_{"nonfinite-test"};
};

TEST_F(NonFiniteGuardTest, ANonFiniteLossOnAnyRankSkipsTheStepEverywhereInEveryStageAndPrecision) {
  for (bool bf16 : {false, true}) {
    for (int stage : {0, 1, 2, 3}) {
      for (int world : {1, 2}) {
        const std::string label = absl::StrCat(bf16 ? "bf16" : "fp32", " stage ", stage, " world ", world);
        store_.RunRanks(world, [&](int rank, Communicator& comm) {
          Gpt model(TinyGpt(), 5);
          auto engine = Engine::Create(model.ptr(), Config(stage, bf16, world), ParallelState::DataParallelOnly(&comm), torch::kCPU);
          ASSERT_TRUE(engine.ok()) << engine.status();
          TrainStep(**engine, model, 0, world, rank, Poison::kNone, -1);
          const auto before = Gathered(**engine, model);
          // The last rank's loss is NaN, its gradient finite: only the loss
          // count can tell the other ranks.
          StepResult spoiled = TrainStep(**engine, model, 1, world, rank, Poison::kConstantInLoss, world - 1);
          EXPECT_TRUE(spoiled.nonfinite) << label << " rank " << rank;
          EXPECT_FALSE(spoiled.stepped) << label;
          EXPECT_EQ(MaxDifference(before, Gathered(**engine, model)), 0.0) << label << " rank " << rank;
          // Rank 0's loss times NaN: a NaN gradient.
          StepResult nan_gradient = TrainStep(**engine, model, 2, world, rank, Poison::kTimesLoss, 0);
          EXPECT_TRUE(nan_gradient.nonfinite) << label;
          EXPECT_EQ(MaxDifference(before, Gathered(**engine, model)), 0.0) << label << " rank " << rank;
          EXPECT_EQ((*engine)->nonfinite_steps(), 2) << label;
          EXPECT_EQ((*engine)->skipped_steps(), 2) << label;
          EXPECT_EQ((*engine)->global_steps(), 3) << label;
          // Training goes on from the parameters before the spoiled steps.
          StepResult clean = TrainStep(**engine, model, 3, world, rank, Poison::kNone, -1);
          EXPECT_TRUE(clean.stepped && !clean.nonfinite) << label;
          const auto after = Gathered(**engine, model);
          EXPECT_GT(MaxDifference(before, after), 0.0) << label;
          EXPECT_TRUE((*engine)->CheckFinite("check").ok()) << label;
        });
      }
    }
  }
}

// On a GPU without a loss scaler the fused kernels clip on the device and
// the host reads the norm only after the step is queued (Note [Clip on the
// device]): the kernel itself must skip. Stages 0-1 take the in-place step,
// stage 2 with accumulation and stage 3 the fused shard step.
TEST(NonFiniteGuardGpuTest, TheFusedKernelsSkipANonFiniteStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (int stage : {0, 1, 2, 3}) {
    const std::string label = absl::StrCat("bf16 on the GPU, stage ", stage);
    Gpt model(TinyGpt(), 5);
    auto engine = Engine::Create(model.ptr(), Config(stage, /*bf16=*/true, 1), ParallelState::DataParallelOnly(nullptr), torch::Device(torch::kCUDA, 0));
    ASSERT_TRUE(engine.ok()) << engine.status();
    TrainStep(**engine, model, 0, 1, 0, Poison::kNone, -1);
    const auto before = Gathered(**engine, model);
    for (Poison poison : {Poison::kConstantInLoss, Poison::kTimesLoss}) {
      StepResult spoiled = TrainStep(**engine, model, 1, 1, 0, poison, 0);
      EXPECT_TRUE(spoiled.nonfinite && !spoiled.stepped) << label;
      EXPECT_EQ(MaxDifference(before, Gathered(**engine, model)), 0.0) << label;
      EXPECT_TRUE((*engine)->CheckFinite("check").ok()) << label;
    }
    StepResult clean = TrainStep(**engine, model, 2, 1, 0, Poison::kNone, -1);
    EXPECT_TRUE(clean.stepped) << label;
    EXPECT_GT(MaxDifference(before, Gathered(**engine, model)), 0.0) << label;
    EXPECT_EQ((*engine)->nonfinite_steps(), 2) << label;
  }
}

}  // namespace
}  // namespace dslaunch::runtime
