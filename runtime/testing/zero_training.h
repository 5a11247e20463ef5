// What the ZeRO tests (runtime/zero) share: the tiny job's config, training on data-parallel
// ranks (threads over Gloo), and the resume check.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/checkpoint/engine_checkpointer.h"
#include "runtime/engine/engine.h"
#include "runtime/fs/file_system.h"
#include "runtime/model/gpt.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime::zero_testing {

inline DsConfig Config(int stage, int64_t micro, int64_t accumulation, int dp) {
  DsConfig config;
  config.zero_optimization.stage = stage;
  config.train_micro_batch_size_per_gpu = micro;
  config.gradient_accumulation_steps = accumulation;
  config.train_batch_size = micro * accumulation * dp;
  config.optimizer.type = "AdamW";
  config.optimizer.lr = 1e-2;
  config.optimizer.weight_decay = 0.01;
  config.gradient_clipping = 0.5;  // clipping across shards is part of what is checked
  config.zero_optimization.reduce_bucket_size = 1000;
  // Stage 3: partition every unit of the tiny model (the default threshold
  // would keep all of them whole).
  config.zero_optimization.stage3_param_persistence_threshold = 0;
  return config;
}

// The trained parameters; with ZeRO-3 they are gathered first (a collective).
inline std::vector<torch::Tensor> TrainedParameters(Engine& engine, Gpt& model) {
  EXPECT_TRUE(engine.GatherFullParameters().ok());
  return testing::Parameters(model);
}

// Global batch of 8 rows per step, split over `dp` ranks and `accumulation` micro-steps.
inline std::vector<double> Train(Engine& engine, Gpt& model, int first_step, int steps, int64_t accumulation,
                          int dp, int rank) {
  const int64_t micro = 8 / (accumulation * dp);
  std::vector<double> losses;
  for (int step = first_step; step < first_step + steps; ++step) {
    double loss_sum = 0;
    for (int64_t m = 0; m < accumulation; ++m) {
      auto [inputs, targets] = testing::Batch(step * 8 + m * micro * dp + rank * micro, micro);
      torch::Tensor loss = model->Loss(inputs, targets);
      loss_sum += loss.item<double>() / accumulation;
      EXPECT_TRUE(engine.Backward(loss).ok());
      EXPECT_TRUE(engine.Step().ok());
    }
    losses.push_back(loss_sum);
  }
  return losses;
}

class ZeroTest : public ::testing::Test {
 protected:
  void RunRanks(int world, const std::function<void(int, Communicator*)>& body) {
    store_.RunRanks(world, [&](int rank, Communicator& comm) { body(rank, &comm); });
  }
  // Trains `steps` steps of `saved` on 2 ranks (batches of 4, one
  // micro-step), saves into `dir`, trains `steps` more; then, for each
  // config of `loaded`, fresh engines (other initial weights) load the
  // checkpoint and train the same later steps: their losses and parameters
  // must equal the uninterrupted run's bit for bit.
  void ExpectResumeBitForBit(const std::string& dir, const DsConfig& saved,
                             const std::vector<std::pair<std::string, DsConfig>>& loaded, int steps, int seed) {
    ASSERT_TRUE(FileSystem::Default().RemoveTree(dir).ok());
    std::vector<double> uninterrupted;
    std::vector<torch::Tensor> final_params;
    RunRanks(2, [&](int rank, Communicator* comm) {
      Gpt model(testing::TinyGpt(), seed);
      auto engine = Engine::Create(model.ptr(), saved, ParallelState::DataParallelOnly(comm), torch::kCPU);
      ASSERT_TRUE(engine.ok()) << engine.status();
      Train(**engine, model, 0, steps, 1, 2, rank);
      ASSERT_TRUE(EngineCheckpointer(**engine).Save(dir, "saved", {{"consumed_samples", steps * 8}}).ok());
      auto later = Train(**engine, model, steps, steps, 1, 2, rank);
      auto params = TrainedParameters(**engine, model);
      if (rank == 0) {
        uninterrupted = later;
        final_params = params;
      }
    });
    for (const auto& [what, config] : loaded) {
      RunRanks(2, [&](int rank, Communicator* comm) {
        Gpt model(testing::TinyGpt(), seed + 1000);
        auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
        ASSERT_TRUE(engine.ok()) << engine.status();
        auto client = EngineCheckpointer(**engine).Load(dir);
        ASSERT_TRUE(client.ok()) << client.status();
        auto later = Train(**engine, model, steps, steps, 1, 2, rank);
        auto params = TrainedParameters(**engine, model);
        if (rank == 0) {
          EXPECT_EQ(later, uninterrupted) << what;
          EXPECT_EQ(testing::MaxDifference(params, final_params), 0.0) << what;
        }
      });
    }
    EXPECT_TRUE(FileSystem::Default().RemoveTree(dir).ok());
  }

  testing::InProcessStore store_{"zero-test"};
};

}  // namespace dslaunch::runtime::zero_testing
