// Note ["auto"] in a job file, and the batch triad.

#include "runtime/config/auto_resolution.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/config/config_loader.h"
#include "runtime/config/config_test_util.h"

namespace dslaunch::runtime {
namespace {

using config_internal::GivenBatchSizes;
using config_internal::ResolveBatchSizes;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// ---- The batch triad -------------------------------------------------------

struct Triad {
  int64_t train, micro, gas;
};

Triad Resolved(const DsConfig& c) {
  return {c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps};
}

MATCHER_P3(IsTriad, train, micro, gas, "") {
  return arg.train == train && arg.micro == micro && arg.gas == gas;
}

TEST(BatchTriad, AllThreeMustAgreeWithTheDataParallelSize) {
  DsConfig c;
  EXPECT_THAT(ResolveBatchSizes({32, 8, 2}, 2, "", &c), IsEmpty());
  EXPECT_THAT(Resolved(c), IsTriad(32, 8, 2));
  EXPECT_THAT(ResolveBatchSizes({32, 8, 1}, 2, "", &c),
              ElementsAre("train_batch_size (32) != train_micro_batch_size_per_gpu (8) * "
                          "gradient_accumulation_steps (1) * data-parallel size (2) = 16"));
}

TEST(BatchTriad, TrainAndMicroGiveAccumulation) {
  DsConfig c;
  EXPECT_THAT(ResolveBatchSizes({64, 8, std::nullopt}, 4, "", &c), IsEmpty());
  EXPECT_THAT(Resolved(c), IsTriad(64, 8, 2));
  EXPECT_THAT(ResolveBatchSizes({20, 8, std::nullopt}, 2, "", &c),
              ElementsAre("train_batch_size (20) is not divisible by "
                          "train_micro_batch_size_per_gpu (8) * data-parallel size (2) = 16, so "
                          "gradient_accumulation_steps cannot be derived"));
}

TEST(BatchTriad, TrainAndAccumulationGiveMicro) {
  DsConfig c;
  EXPECT_THAT(ResolveBatchSizes({48, std::nullopt, 3}, 4, "", &c), IsEmpty());
  EXPECT_THAT(Resolved(c), IsTriad(48, 4, 3));
  EXPECT_THAT(ResolveBatchSizes({20, std::nullopt, 3}, 2, "", &c),
              ElementsAre("train_batch_size (20) is not divisible by gradient_accumulation_steps "
                          "(3) * data-parallel size (2) = 6, so train_micro_batch_size_per_gpu "
                          "cannot be derived"));
}

TEST(BatchTriad, MicroAndAccumulationGiveTrain) {
  DsConfig c;
  EXPECT_THAT(ResolveBatchSizes({std::nullopt, 4, 3}, 8, "", &c), IsEmpty());
  EXPECT_THAT(Resolved(c), IsTriad(96, 4, 3));
}

TEST(BatchTriad, TrainAloneSplitsOverRanksWithoutAccumulation) {
  DsConfig c;
  EXPECT_THAT(ResolveBatchSizes({16, std::nullopt, std::nullopt}, 4, "", &c), IsEmpty());
  EXPECT_THAT(Resolved(c), IsTriad(16, 4, 1));
  EXPECT_THAT(ResolveBatchSizes({10, std::nullopt, std::nullopt}, 4, "", &c),
              ElementsAre("train_batch_size (10) is not divisible by the data-parallel size (4), "
                          "so train_micro_batch_size_per_gpu cannot be derived"));
}

TEST(BatchTriad, MicroAloneMeansNoAccumulation) {
  DsConfig c;
  EXPECT_THAT(ResolveBatchSizes({std::nullopt, 8, std::nullopt}, 3, "", &c), IsEmpty());
  EXPECT_THAT(Resolved(c), IsTriad(24, 8, 1));
}

TEST(BatchTriad, NoneGivenNamesTheThreeKeys) {
  DsConfig c;
  for (const GivenBatchSizes& given :
       {GivenBatchSizes{}, GivenBatchSizes{std::nullopt, std::nullopt, 4}}) {
    EXPECT_THAT(ResolveBatchSizes(given, 1, "ds_config.", &c),
                ElementsAre(AllOf(HasSubstr("ds_config.train_batch_size"),
                                  HasSubstr("ds_config.train_micro_batch_size_per_gpu"),
                                  HasSubstr("ds_config.gradient_accumulation_steps"))));
  }
}

TEST(BatchTriad, ModelParallelismShrinksTheDataParallelSize) {
  DsConfig c;
  c.tensor_parallel.tp_size = 2;
  c.pipeline.stages = 2;
  EXPECT_THAT(ResolveBatchSizes({16, 4, std::nullopt}, 8, "", &c), IsEmpty());
  EXPECT_THAT(Resolved(c), IsTriad(16, 4, 2));  // dp = 8 / 4 = 2
  EXPECT_THAT(ResolveBatchSizes({16, 4, std::nullopt}, 6, "", &c),
              ElementsAre("world size 6 is not divisible by tensor_parallel.tp_size (2) * "
                          "pipeline.stages (2)"));
  EXPECT_THAT(ResolveBatchSizes({32, 8, 1}, 8, "", &c),
              ElementsAre(HasSubstr("data-parallel size (2 = world size 8 / "
                                    "(tensor_parallel.tp_size 2 * pipeline.stages 2)) = 16")));
}

// ---- "auto" in a job file --------------------------------------------------

constexpr char kJobHead[] =
    R"(model: {type: gpt, layers: 2, heads: 4, width: 64, sequence_length: 32}
data: {prepared: data/x}
)";

class AutoTest : public ConfigFileTest {
 protected:
  absl::StatusOr<JobConfig> Load(const std::string& train, const std::string& ds,
                                 int world_size = 1) {
    path_ = Write("train.cfg", absl::StrCat(kJobHead, "train:\n", train, "ds_config:\n", ds));
    return LoadJobConfig(path_, {}, WorldShape{world_size});
  }
  std::string path_;
};

TEST_F(AutoTest, EveryAutoTakesItsJobFileValue) {
  auto job = Load(R"(  steps: 500
  lr: 0.002
  min_lr: 0.0001
  warmup_steps: 40
  weight_decay: 0.05
  betas: [0.85, 0.98]
  eps: 1.0e-7
  grad_clip: 0.5
  micro_batch_size: 4
  global_batch_size: 32
  precision: bf16
)",
                  R"(  train_batch_size: auto
  train_micro_batch_size_per_gpu: auto
  gradient_accumulation_steps: auto
  gradient_clipping: auto
  optimizer:
    type: AdamW
    params: {lr: auto, betas: auto, eps: auto, weight_decay: auto}
  scheduler:
    type: WarmupDecayLR
    params:
      warmup_min_lr: auto
      warmup_max_lr: auto
      warmup_num_steps: auto
      total_num_steps: auto
  fp16: {enabled: auto}
  bf16: {enabled: auto}
  zero_optimization:
    stage: 0
    reduce_bucket_size: auto
    stage3_prefetch_bucket_size: auto
    stage3_param_persistence_threshold: auto
)",
                  2);
  ASSERT_TRUE(job.ok()) << job.status();
  const DsConfig& c = job->ds;
  EXPECT_EQ(c.train_batch_size, 32);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 4);  // 32 / (4 * 2)
  EXPECT_EQ(c.gradient_clipping, 0.5);
  EXPECT_EQ(c.optimizer.lr, 0.002);
  EXPECT_EQ(c.optimizer.betas[0], 0.85);
  EXPECT_EQ(c.optimizer.betas[1], 0.98);
  EXPECT_EQ(c.optimizer.eps, 1e-7);
  EXPECT_EQ(c.optimizer.weight_decay, 0.05);
  EXPECT_EQ(c.scheduler.warmup_min_lr, 0.0001);
  EXPECT_EQ(c.scheduler.warmup_max_lr, 0.002);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 40);
  EXPECT_EQ(c.scheduler.total_num_steps, 500);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 64 * 64);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 3686);  // int(0.9 * 64 * 64)
  EXPECT_EQ(c.zero_optimization.stage3_param_persistence_threshold, 640);
  EXPECT_THAT(job->not_yet_supported, IsEmpty());
}

TEST_F(AutoTest, PrecisionFp16EnablesFp16) {
  auto job = Load("  steps: 10\n  precision: fp16\n  micro_batch_size: 2\n",
                  "  train_micro_batch_size_per_gpu: auto\n  fp16: {enabled: auto}\n"
                  "  bf16: {enabled: auto}\n");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->ds.fp16.enabled);
  EXPECT_FALSE(job->ds.bf16.enabled);
}

TEST_F(AutoTest, BatchAutoFollowsTheWorldSize) {
  for (int world : {1, 2, 4}) {
    auto job = Load("  steps: 10\n  micro_batch_size: 8\n",
                    "  train_batch_size: auto\n  train_micro_batch_size_per_gpu: auto\n"
                    "  gradient_accumulation_steps: 1\n",
                    world);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->ds.train_batch_size, 8 * world);
    EXPECT_EQ(job->ds.train_micro_batch_size_per_gpu, 8);
  }
}

TEST_F(AutoTest, BatchAutoWithNothingToFillIt) {
  auto job =
      Load("  steps: 10\n", "  train_batch_size: auto\n  train_micro_batch_size_per_gpu: auto\n");
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(AllOf(HasSubstr(path_ + ":6: no batch size"),
                                HasSubstr("ds_config.train_micro_batch_size_per_gpu"),
                                HasSubstr("train.global_batch_size"))));
}

TEST_F(AutoTest, WrittenValuesMustAgreeWithTheJobFile) {
  auto job = Load("  steps: 10\n  lr: 0.001\n  micro_batch_size: 8\n  precision: bf16\n",
                  R"(  train_micro_batch_size_per_gpu: 4
  optimizer: {type: AdamW, params: {lr: 0.0003}}
  bf16: {enabled: false}
)");
  EXPECT_THAT(
      ProblemLines(job),
      ElementsAre(
          path_ + ":10: ds_config.optimizer.params.lr: 0.0003 disagrees with train.lr (0.001) in "
                  "the job file; write \"auto\" to take it, or make them equal",
          HasSubstr(":9: ds_config.train_micro_batch_size_per_gpu: 4 disagrees with "
                    "train.micro_batch_size (8)"),
          HasSubstr(":11: ds_config.bf16.enabled: false disagrees with train.precision (bf16)")));
}

TEST_F(AutoTest, HalfPrecisionInTheJobNeedsTheDsConfigToSayIt) {
  auto job = Load("  steps: 10\n  precision: fp16\n", "  train_batch_size: 8\n");
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(HasSubstr("train.precision is fp16 but ds_config.fp16.enabled is not "
                                    "set")));
}

TEST_F(AutoTest, NoOptimizerSectionTakesTheTrainSection) {
  auto job = Load(
      "  steps: 10\n  lr: 0.01\n  betas: [0.5, 0.6]\n  eps: 1.0e-5\n"
      "  weight_decay: 0.2\n",
      "  train_batch_size: 8\n");
  ASSERT_TRUE(job.ok()) << job.status();
  const OptimizerConfig& o = job->ds.optimizer;
  EXPECT_FALSE(o.present);
  EXPECT_EQ(o.type, "AdamW");
  EXPECT_EQ(o.lr, 0.01);
  EXPECT_EQ(o.betas[0], 0.5);
  EXPECT_EQ(o.betas[1], 0.6);
  EXPECT_EQ(o.eps, 1e-5);
  EXPECT_EQ(o.weight_decay, 0.2);
}

TEST_F(AutoTest, AutoWhereItIsNotAcceptedIsATypeError) {
  auto job = Load("  steps: 10\n", "  train_batch_size: 8\n  steps_per_print: auto\n");
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(HasSubstr("ds_config.steps_per_print: expected an integer, got "
                                    "'auto'")));
}

}  // namespace
}  // namespace dslaunch::runtime
