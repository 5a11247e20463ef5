// Expert × data-parallel training (Note [Mixture of experts]): over 4 Gloo
// ranks at ep 2 (× dp 2) and ep 4 (× dp 1), ZeRO 0, 1 and 2, a GPT-MoE and a
// Mixtral-style Llama take the steps of ep 1 (every micro-batch's loss on
// every rank, then every parameter a rank holds), with gradient clipping
// and accumulation; the experts' optimizer state per rank shrinks with the
// expert-data-parallel size.
//
// Tolerances (fp32): losses and gradient norms 1e-5 relative; parameters
// 3e-4 relative to each tensor's largest magnitude after three AdamW steps
// (the expert products run over other batches of rows, so gradients differ
// in their last bits, and Adam's first steps move an element whose gradient
// is zero up to rounding — the GPT's key bias, up to 8e-5 seen — by about lr
// whatever its size). The gradient norms carry the sensitivity to a wrong
// scale. bf16: 2e-2 relative on the losses.
#include "runtime/testing/expert_parallel_training.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using testing::CompareNamed;
using testing::ExpertLayout;
using testing::ExpertRank;
using testing::InProcessStore;

struct TrainedRun {
  std::vector<std::vector<double>> losses;                   // per rank
  std::vector<std::vector<double>> grad_norms;               // per rank
  std::vector<std::map<std::string, torch::Tensor>> params;  // per rank
  std::vector<Engine::MemoryBreakdown> memory;               // per rank
};

TrainedRun Train(InProcessStore& store, int attempt, const ExpertLayout& layout, int steps) {
  TrainedRun run;
  run.losses.resize(layout.world);
  run.grad_norms.resize(layout.world);
  run.params.resize(layout.world);
  run.memory.resize(layout.world);
  testing::RunExpertParallelRanks(store, attempt, layout.world, layout.ep, [&](int rank, const ParallelState& state) {
    ExpertRank r = testing::StartExpertRank(layout, state);
    ASSERT_NE(r.engine, nullptr);
    testing::TrainExpertSteps(r, layout, state, 0, steps, &run.losses[rank], &run.grad_norms[rank]);
    run.params[rank] = testing::NamedParameters(*r.module);
    run.memory[rank] = r.engine->Memory();
  });
  return run;
}

// `run` took `reference`'s steps, rank by rank: every micro-batch's loss and
// step's gradient norm (1e-5) and every parameter it holds (3e-4).
void ExpectTheStepsOf(const TrainedRun& reference, const TrainedRun& run, int world) {
  for (int rank = 0; rank < world; ++rank) {
    ASSERT_EQ(run.losses[rank].size(), reference.losses[rank].size());
    for (size_t i = 0; i < run.losses[rank].size(); ++i) {
      EXPECT_NEAR(run.losses[rank][i], reference.losses[rank][i], 1e-5) << "rank " << rank << " micro-batch " << i;
    }
    // The norm covers both partitions: a wrong expert-gradient scale
    // (DeepSpeed #5618) shows here, where Adam's updates would hide it.
    ASSERT_EQ(run.grad_norms[rank].size(), reference.grad_norms[rank].size());
    for (size_t i = 0; i < run.grad_norms[rank].size(); ++i) {
      EXPECT_NEAR(run.grad_norms[rank][i], reference.grad_norms[rank][i], 1e-5 * reference.grad_norms[rank][i])
          << "rank " << rank << " step " << i;
    }
    std::vector<std::string> bad = CompareNamed(run.params[rank], reference.params[0], 3e-4);
    EXPECT_TRUE(bad.empty()) << "rank " << rank << ": " << bad.size() << " mismatches, first: " << bad.front();
  }
}

class ExpertParallelTrainingTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ExpertParallelTrainingTest, EveryExpertParallelSizeTakesTheStepsOfOne) {
  const auto [family, stage] = GetParam();
  InProcessStore store;
  ExpertLayout layout{.family = family, .ep = 1, .stage = stage, .gas = 2};
  TrainedRun reference = Train(store, 0, layout, 3);
  for (int ep : {2, 4}) {
    layout.ep = ep;
    SCOPED_TRACE(layout.Describe());
    ExpectTheStepsOf(reference, Train(store, ep, layout, 3), layout.world);
  }
}

INSTANTIATE_TEST_SUITE_P(FamiliesAndStages, ExpertParallelTrainingTest,
                         ::testing::Combine(::testing::Values("gpt", "llama"), ::testing::Values(0, 1, 2)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
                           return std::get<0>(info.param) + "Zero" + std::to_string(std::get<1>(info.param));
                         });

// LoRA on Mixtral's experts (runtime/model/mixtral_expert.h) and on
// attention: each expert's adapters live on its expert-parallel rank, start
// from the expert's own generator and have their gradients reduced over its
// expert-data-parallel group, so every expert-parallel size takes the steps
// of one (the frozen base included: it must not move).
TEST(ExpertParallelTrainingTest, LoraOnTheExpertsTakesTheStepsOfOne) {
  InProcessStore store;
  int attempt = 0;
  struct Case {
    int stage;
    std::vector<std::string> lora;
    int adapted_per_expert;  // projections of each expert that carry adapters
  };
  // Attention only: the experts stay frozen on their ranks (no expert
  // partition), and the exports gather them all the same.
  for (const Case& c : {Case{0, {"w1", "w2", "w3", "q_proj"}, 3}, Case{2, {"w1", "w2", "w3", "q_proj"}, 3},
                        Case{2, {"q_proj", "v_proj"}, 0}}) {
    const int stage = c.stage;
    ExpertLayout layout{.family = "llama", .ep = 1, .stage = stage, .gas = 2};
    layout.lora = c.lora;
    TrainedRun reference = Train(store, attempt++, layout, 3);
    ModelInterface* unused = nullptr;
    const std::map<std::string, torch::Tensor> initial =
        testing::NamedParameters(*testing::BuildMoeModel(layout, ExpertParallelGroup{}, &unused));
    for (int ep : {2, 4}) {
      layout.ep = ep;
      SCOPED_TRACE(layout.Describe());
      TrainedRun run = Train(store, attempt++, layout, 3);
      ExpectTheStepsOf(reference, run, layout.world);
      for (int rank = 0; rank < layout.world; ++rank) {
        int expert_adapters = 0;
        for (const auto& [name, value] : run.params[rank]) {
          if (IsExpertParameter(name) && IsLoraParameterName(name)) ++expert_adapters;
        }
        // Two factors on each adapted projection of each expert it holds, in
        // each of the tiny Llama's layers.
        EXPECT_EQ(expert_adapters, testing::TinyLlama().layers * 2 * c.adapted_per_expert * testing::kMoeExperts / ep)
            << "rank " << rank;
        for (const auto& [name, value] : run.params[rank]) {
          if (!IsLoraParameterName(name)) EXPECT_TRUE(torch::equal(value, initial.at(name))) << name << " moved";
        }
      }
    }
  }
}

// In bf16 the losses: Adam's first steps move every element by about lr
// whatever its gradient's size, so a gradient element that bf16 rounding
// leaves near zero in one run and not the other moves differently, and the
// parameters are not comparable element by element (fp32 above is).
// With the optimizer on the host too: both partitions step range by range
// while the last range uploads, the CPU Adam writing the rounded bf16
// parameters into each partition's host copy (Note [bf16 parameters from
// the host step]).
TEST(ExpertParallelTrainingTest, Bf16TakesTheLossesOfOne) {
  int attempt = 0;
  for (const std::string offload : {"none", "cpu"}) {
    InProcessStore store;
    ExpertLayout layout{.family = "llama", .ep = 1, .stage = 2, .bf16 = true, .offload = offload};
    TrainedRun reference = Train(store, attempt++, layout, 3);
    layout.ep = 2;
    TrainedRun run = Train(store, attempt++, layout, 3);
    for (int rank = 0; rank < layout.world; ++rank) {
      ASSERT_EQ(run.losses[rank].size(), reference.losses[rank].size());
      for (size_t i = 0; i < run.losses[rank].size(); ++i) {
        EXPECT_NEAR(run.losses[rank][i], reference.losses[rank][i], 2e-2 * reference.losses[rank][i])
            << "offload " << offload << ", rank " << rank << " step " << i;
      }
      if (offload == "cpu") EXPECT_GT(run.memory[rank].host_parameter_copy, 0);
    }
  }
}

TEST(ExpertParallelTrainingTest, ExpertStateShrinksWithTheExpertDataParallelSize) {
  // 4 experts of the same size over 4 ranks. ep 1: every rank the 4
  // experts' state cut over 4 (ZeRO-1); ep 2: 2 experts cut over 2; ep 4: 1
  // expert whole. Stage 0 at ep 2: 2 experts whole.
  InProcessStore store;
  std::map<std::string, int64_t> expert_state;
  int attempt = 0;
  for (auto [ep, stage] : {std::pair{2, 1}, std::pair{4, 1}, std::pair{2, 0}}) {
    ExpertLayout layout{.family = "llama", .ep = ep, .stage = stage};
    TrainedRun run = Train(store, attempt++, layout, 1);
    expert_state[absl::StrCat("ep", ep, "z", stage)] = run.memory[0].expert_optimizer_state;
    EXPECT_EQ(run.memory[0].expert_master_weights * 2, run.memory[0].expert_optimizer_state);
  }
  // One SwiGLU expert: 3 matrices of 16 x 24; two moments of 4 bytes.
  const int64_t one_expert = 3 * 16 * 24 * 2 * 4;
  EXPECT_EQ(expert_state["ep4z1"], one_expert * 2 /*layers*/);
  EXPECT_EQ(expert_state["ep2z1"], one_expert * 2 * 2 / 2);
  EXPECT_EQ(expert_state["ep2z0"], one_expert * 2 * 2);
}

// At expert-parallel size 1 the experts are ordinary parameters of their
// block's ZeRO-3 unit, gathered with it.
TEST(ExpertParallelTrainingTest, ZeroStage3AtExpertParallelOneTakesTheStepsOfStage2) {
  InProcessStore store;
  for (const std::string family : {"gpt", "llama"}) {
    SCOPED_TRACE(family);
    TrainedRun stage2 = Train(store, family == "gpt" ? 0 : 2, ExpertLayout{.family = family, .stage = 2, .gas = 2}, 3);
    TrainedRun stage3 = Train(store, family == "gpt" ? 1 : 3, ExpertLayout{.family = family, .stage = 3, .gas = 2}, 3);
    for (int rank = 0; rank < 4; ++rank) {
      for (size_t i = 0; i < stage2.losses[rank].size(); ++i) {
        EXPECT_NEAR(stage3.losses[rank][i], stage2.losses[rank][i], 1e-5 * stage2.losses[rank][i]);
      }
      for (size_t i = 0; i < stage2.grad_norms[rank].size(); ++i) {
        EXPECT_NEAR(stage3.grad_norms[rank][i], stage2.grad_norms[rank][i], 1e-5 * stage2.grad_norms[rank][i]);
      }
      // 3e-4: the GPT's key bias, whose gradient is zero up to rounding
      // (softmax ignores a per-query constant), moves by Adam's sign of noise.
      std::vector<std::string> bad = CompareNamed(stage3.params[rank], stage2.params[rank], 3e-4);
      EXPECT_TRUE(bad.empty()) << "rank " << rank << ": " << bad.size() << " mismatches, first: " << bad.front();
    }
  }
}

TEST(ExpertParallelTrainingTest, RefusesZeroStage3) {
  InProcessStore store;
  ExpertLayout layout{.family = "gpt", .ep = 2, .stage = 3};
  testing::RunExpertParallelRanks(store, 0, layout.world, layout.ep, [&](int, const ParallelState& state) {
    ModelInterface* family = nullptr;
    auto module = testing::BuildMoeModel(layout, testing::ExpertGroupOf(state), &family);
    std::shared_ptr<const ParallelState> borrowed(&state, [](const ParallelState*) {});
    auto engine = Engine::Create(module, testing::ExpertConfig(layout), borrowed, torch::kCPU);
    ASSERT_FALSE(engine.ok());
    EXPECT_NE(engine.status().message().find("zero_optimization.stage=3 with expert parallelism"), std::string::npos)
        << engine.status();
  });
}

}  // namespace
}  // namespace dslaunch::runtime
