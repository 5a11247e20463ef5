// The engine against plain arithmetic: accumulation and data parallelism give
// the gradients of the whole batch, fp16 overflows skip steps, clipping
// bounds the norm (checkpoints: runtime/checkpoint/engine_checkpointer_test.cc).
#include "runtime/engine/engine.h"


#include <unistd.h>
#include <thread>

#include "gtest/gtest.h"
#include "runtime/model/gpt.h"
#include "runtime/testing/rank_group.h"
#include "runtime/testing/train_steps.h"

namespace dslaunch::runtime {
namespace {

using testing::Batch;
using testing::MaxDifference;
using testing::Parameters;
using testing::TinyGpt;

DsConfig BaseConfig(int64_t micro, int64_t accumulation, int dp) {
  DsConfig config;
  config.train_micro_batch_size_per_gpu = micro;
  config.gradient_accumulation_steps = accumulation;
  config.train_batch_size = micro * accumulation * dp;
  config.optimizer.type = "AdamW";
  config.optimizer.lr = 1e-2;
  config.optimizer.weight_decay = 0.01;
  config.zero_optimization.reduce_bucket_size = 1000;  // several buckets
  return config;
}

std::vector<double> Train(Engine& engine, Gpt& model, int steps, int64_t micro, int64_t accumulation, int dp,
                          int rank, int first_step = 0) {
  return testing::TrainSteps(engine, model, steps, micro, accumulation, dp, rank, first_step);
}

TEST(Engine, AccumulationMatchesOneLargeBatch) {
  Gpt whole(TinyGpt(), 7), accumulated(TinyGpt(), 7);
  auto a = Engine::Create(whole.ptr(), BaseConfig(8, 1, 1), ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  auto b = Engine::Create(accumulated.ptr(), BaseConfig(4, 2, 1), ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(a.ok() && b.ok());
  auto la = Train(**a, whole, 3, 8, 1, 1, 0);
  auto lb = Train(**b, accumulated, 3, 4, 2, 1, 0);
  EXPECT_EQ((*b)->global_steps(), 3);
  EXPECT_EQ((*b)->micro_steps(), 6);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(la[i], lb[i], 1e-5);
  // fp32: the only difference is summation order (mean of 8 vs two means of 4).
  EXPECT_LT(MaxDifference(Parameters(whole), Parameters(accumulated)), 1e-4);  // see DataParallelMatchesOneRank for the bound
}

TEST(Engine, StepsOnlyAtTheAccumulationBoundary) {
  Gpt model(TinyGpt(), 1);
  auto engine = Engine::Create(model.ptr(), BaseConfig(2, 3, 1), ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(engine.ok());
  auto before = Parameters(model);
  for (int m = 0; m < 2; ++m) {
    auto [inputs, targets] = Batch(m * 2, 2);
    ASSERT_TRUE((*engine)->Backward(model->Loss(inputs, targets)).ok());
    auto result = (*engine)->Step();
    ASSERT_TRUE(result.ok());
    EXPECT_FALSE(result->boundary);
  }
  EXPECT_EQ(MaxDifference(before, Parameters(model)), 0.0);
  auto [inputs, targets] = Batch(4, 2);
  ASSERT_TRUE((*engine)->Backward(model->Loss(inputs, targets)).ok());
  auto result = (*engine)->Step();
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->boundary && result->stepped);
  EXPECT_GT(MaxDifference(before, Parameters(model)), 0.0);
}

TEST(Engine, ClippingBoundsTheUpdateNorm) {
  DsConfig config = BaseConfig(4, 1, 1);
  config.optimizer.type = "Adam";
  config.optimizer.adam_w_mode = false;
  config.gradient_clipping = 1e-3;
  Gpt model(TinyGpt(), 3);
  auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(engine.ok());
  auto [inputs, targets] = Batch(0, 4);
  ASSERT_TRUE((*engine)->Backward(model->Loss(inputs, targets)).ok());
  auto result = (*engine)->Step();
  ASSERT_TRUE(result.ok());
  EXPECT_GT(result->grad_norm, 1e-3);  // the reported norm is the unclipped one
  EXPECT_NEAR(result->clipped_norm, 1e-3, 1e-8);  // what the optimizer saw: exactly the bound

  // Below the bound nothing is scaled.
  DsConfig loose = config;
  loose.gradient_clipping = 1e6;
  Gpt other(TinyGpt(), 3);
  auto unclipped = Engine::Create(other.ptr(), loose, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(unclipped.ok());
  ASSERT_TRUE((*unclipped)->Backward(other->Loss(inputs, targets)).ok());
  auto free = (*unclipped)->Step();
  ASSERT_TRUE(free.ok());
  EXPECT_DOUBLE_EQ(free->clipped_norm, free->grad_norm);
  EXPECT_DOUBLE_EQ(free->grad_norm, result->grad_norm);  // same model, same batch
}

// LibTorch 1.13 has no half-precision matmul or LayerNorm on CPU, so the
// fp16 path is exercised with an elementwise model here; the GPT runs fp16 on
// GPU hosts (and bf16 on CPU, below).
struct ElementwiseModel : torch::nn::Module {
  ElementwiseModel() { weight = register_parameter("weight", torch::linspace(0.5, 1.5, 6)); }
  torch::Tensor Loss(const torch::Tensor& x) { return (weight * x.to(weight.scalar_type())).sum(); }
  torch::Tensor weight;
};

TEST(Engine, Fp16OverflowSkipsTheStepAndHalvesTheScale) {
  DsConfig config = BaseConfig(2, 1, 1);
  config.fp16.enabled = true;
  config.fp16.initial_scale_power = 8;
  config.fp16.hysteresis = 1;
  config.scheduler.type = "WarmupLR";
  config.scheduler.warmup_min_lr = 0.0;
  config.scheduler.warmup_max_lr = 1e-2;
  config.scheduler.warmup_num_steps = 10;
  config.scheduler.warmup_type = "linear";
  auto model = std::make_shared<ElementwiseModel>();
  auto engine = Engine::Create(model, config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->compute_dtype(), torch::kHalf);
  EXPECT_EQ(model->weight.scalar_type(), torch::kHalf);
  EXPECT_EQ((*engine)->loss_scale(), 256.0);
  torch::Tensor before = model->weight.detach().clone();

  // A value fp16 cannot hold after scaling: the gradient overflows.
  ASSERT_TRUE((*engine)->Backward(model->Loss(torch::full({6}, 60000.0))).ok());
  auto result = (*engine)->Step();
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->boundary);
  EXPECT_FALSE(result->stepped);
  EXPECT_EQ((*engine)->skipped_steps(), 1);
  EXPECT_EQ((*engine)->global_steps(), 1);      // global steps still advance
  EXPECT_EQ((*engine)->loss_scale(), 128.0);    // hysteresis 1: halve at once
  EXPECT_TRUE(torch::equal(before, model->weight));
  EXPECT_EQ((*engine)->CurrentLr(), 0.0);       // the schedule did not advance

  // A clean step goes through, unscaled: gradient 1 per element.
  ASSERT_TRUE((*engine)->Backward(model->Loss(torch::ones({6}))).ok());
  result = (*engine)->Step();
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->stepped);
  EXPECT_NEAR(result->grad_norm, std::sqrt(6.0), 1e-3);
  // DeepSpeed's linear WarmupLR: lr(k) = max_lr * (k - 1) / warmup for the
  // k-th successful step's successor, so two clean steps reach 1e-3; the
  // skipped step did not count.
  ASSERT_TRUE((*engine)->Backward(model->Loss(torch::ones({6}))).ok());
  ASSERT_TRUE((*engine)->Step().ok());
  EXPECT_EQ((*engine)->global_steps(), 3);
  EXPECT_NEAR((*engine)->CurrentLr(), 1e-3, 1e-12);
}

TEST(Engine, MixedPrecisionKeepsFp32Masters) {
  DsConfig config = BaseConfig(2, 1, 1);
  config.bf16.enabled = true;
  Gpt model(TinyGpt(), 5);
  auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(engine.ok());
  for (const auto& p : model->parameters()) EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
  Train(**engine, model, 2, 2, 1, 1, 0);
  Engine::MemoryBreakdown memory = (*engine)->Memory();
  // Ψ parameters: 2Ψ (bf16) + 4Ψ masters + 8Ψ Adam moments.
  EXPECT_EQ(memory.master_weights, memory.parameters * 2);
  EXPECT_EQ(memory.optimizer_state, memory.parameters * 4);
}

TEST(Engine, DataParallelMatchesOneRank) {
  testing::InProcessStore store("dp-test");
  Gpt single(TinyGpt(), 11);
  auto engine = Engine::Create(single.ptr(), BaseConfig(8, 1, 1), ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(engine.ok());
  auto reference = Train(**engine, single, 3, 8, 1, 1, 0);
  auto reference_params = Parameters(single);

  for (int world : {2, 4}) {
    std::vector<std::vector<double>> losses(world);
    std::vector<std::vector<torch::Tensor>> params(world);
    store.RunRanks(world, [&](int rank, Communicator& comm) {
      Gpt model(TinyGpt(), 11);
      auto dp_engine = Engine::Create(model.ptr(), BaseConfig(8 / world, 1, world), ParallelState::DataParallelOnly(&comm), torch::kCPU);
      ASSERT_TRUE(dp_engine.ok());
      losses[rank] = Train(**dp_engine, model, 3, 8 / world, 1, world, rank);
      params[rank] = Parameters(model);
    });
    for (int step = 0; step < 3; ++step) {
      double mean = 0;
      for (int rank = 0; rank < world; ++rank) mean += losses[rank][step] / world;
      // fp32, same data: only the order of floating-point sums differs.
      EXPECT_NEAR(mean, reference[step], 1e-5) << "world " << world << " step " << step;
    }
    for (int rank = 0; rank < world; ++rank) {
      // Three AdamW steps of lr 1e-2 move each weight by up to ~3e-2; Adam
      // divides by sqrt(v), so a gradient that differs in its last bits moves
      // a weight differently by up to lr·(relative gradient difference) per
      // step. Seen: 3e-6 here (Debian's BLAS), 1.1e-5 on the GPU host's CPU
      // (another BLAS). 1e-4 is 0.3% of the movement, while a wrong batch or
      // a missing average moves weights by ~1e-2.
      EXPECT_LT(MaxDifference(params[rank], reference_params), 1e-4) << "world " << world;
      EXPECT_EQ(MaxDifference(params[rank], params[0]), 0.0);  // replicas stay identical
    }
  }
}

}  // namespace
}  // namespace dslaunch::runtime
