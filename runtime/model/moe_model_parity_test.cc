// The expert-parallel parity harness on whole models (Note [Mixture of
// experts]): a GPT-MoE (every second block an expert block) and a Mixtral-
// style Llama (every layer) over 4 Gloo ranks at ep 2 (× dp 2) and ep 4 give
// every rank the loss and dense gradients of ep 1, and every expert the
// gradient summed over its expert-data-parallel group that ep 1 sums over
// all ranks: top-1 capacity-bound and top-2 dropless, with every block
// activation-checkpointed (the auxiliary loss's gradient survives the
// recomputation), and bf16.
//
// Tolerances: fp32 1e-5 relative (the experts multiply other batches of
// rows); bf16 4e-2, as the tensor-parallel harness (8 significant bits: one
// rounding is up to 4e-3, and the same sums round in other blockings).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/model/gpt.h"
#include "runtime/model/llama.h"
#include "runtime/moe/expert_exchange.h"
#include "runtime/testing/expert_parallel_harness.h"

namespace dslaunch::runtime {
namespace {

using testing::BackwardResult;
using testing::CompareBackward;
using testing::InProcessStore;

constexpr int64_t kExperts = 4;
constexpr int64_t kMoeVocab = 37;
constexpr int64_t kMoeTime = 8;

struct MoeVariant {
  std::string family;
  int64_t k = 1;
  bool drop_tokens = true;
  bool checkpointed = false;
  torch::ScalarType dtype = torch::kFloat;
};

std::string DescribeMoeVariant(const MoeVariant& v) {
  return absl::StrCat(v.family, " top", v.k, v.drop_tokens ? " capacity-bound" : " dropless",
                      v.checkpointed ? " checkpointed" : "", " ", c10::toString(v.dtype));
}

GptOptions FourBlockGpt() {
  GptOptions options = testing::TinyGpt();
  options.layers = 4;
  options.sequence_length = kMoeTime;
  options.vocab_size = kMoeVocab;
  return options;
}

MoeOptions Moe(const MoeVariant& v, const ParallelState& parallel) {
  MoeOptions moe;
  moe.gating = GatingOptions{.num_experts = kExperts,
                             .top_k = v.k,
                             .capacity_factor = 1.0,
                             .min_capacity = 1,
                             .drop_tokens = v.drop_tokens,
                             .use_rts = false,
                             .second_expert_sampling = false};
  moe.every = v.family == "gpt" ? 2 : 1;
  moe.aux_loss_coef = 0.05;
  moe.z_loss_coef = 0.01;
  moe.expert_parallel = testing::ExpertGroupOf(parallel);
  return moe;
}

std::vector<BackwardResult> RunMoeModel(InProcessStore& store, int attempt, int ep, const MoeVariant& v) {
  constexpr int kWorld = 4;
  std::vector<BackwardResult> results(kWorld);
  testing::RunExpertParallelRanks(store, attempt, kWorld, ep, [&](int rank, const ParallelState& parallel) {
    std::shared_ptr<torch::nn::Module> module;
    ModelInterface* model = nullptr;
    if (v.family == "gpt") {
      GptOptions options = FourBlockGpt();
      options.checkpointed_blocks = v.checkpointed ? 4 : 0;
      options.moe = Moe(v, parallel);
      auto gpt = std::make_shared<GptImpl>(options, /*seed=*/5);
      model = gpt.get();
      module = gpt;
    } else {
      LlamaOptions options = testing::TinyLlama();
      options.vocab_size = kMoeVocab;
      options.checkpointed_blocks = v.checkpointed ? 2 : 0;
      options.moe = Moe(v, parallel);
      auto llama = std::make_shared<LlamaImpl>(options, /*seed=*/5);
      model = llama.get();
      module = llama;
    }
    module->to(v.dtype);
    module->train();
    torch::Tensor tokens = (torch::arange(2 * kMoeTime) * (7 + 2 * rank) % kMoeVocab).view({2, kMoeTime});
    torch::Tensor targets = (torch::arange(2 * kMoeTime) * (3 + rank) % kMoeVocab).view({2, kMoeTime});
    torch::Tensor loss = model->Loss(tokens, targets);
    (loss * 2).backward();  // a scaled backward, as the engine's
    BackwardResult& result = results[rank];
    result.loss = loss.item<double>();
    testing::CollectGradients(*module, kExperts, parallel.world(), &result);
  });
  return results;
}

class MoeModelParityTest : public ::testing::TestWithParam<MoeVariant> {};

TEST_P(MoeModelParityTest, EveryExpertParallelSizeEqualsOne) {
  const MoeVariant v = GetParam();
  SCOPED_TRACE(DescribeMoeVariant(v));
  const double tolerance = v.dtype == torch::kFloat ? 1e-5 : 4e-2;
  InProcessStore store;
  std::vector<BackwardResult> reference = RunMoeModel(store, 0, 1, v);
  ASSERT_FALSE(reference[0].expert_sums.empty());
  for (int ep : {2, 4}) {
    std::vector<std::string> bad = CompareBackward(RunMoeModel(store, ep, ep, v), reference, tolerance);
    EXPECT_TRUE(bad.empty()) << "ep " << ep << ": " << bad.size() << " mismatches, first: " << bad.front();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, MoeModelParityTest,
    ::testing::Values(MoeVariant{.family = "gpt", .k = 1, .drop_tokens = true},
                      MoeVariant{.family = "gpt", .k = 2, .drop_tokens = false, .checkpointed = true},
                      MoeVariant{.family = "llama", .k = 2, .drop_tokens = false},
                      MoeVariant{.family = "llama", .k = 1, .drop_tokens = true, .checkpointed = true},
                      MoeVariant{.family = "llama", .k = 2, .drop_tokens = false, .dtype = torch::kBFloat16}),
    [](const ::testing::TestParamInfo<MoeVariant>& info) {
      const MoeVariant& v = info.param;
      return absl::StrCat(v.family == "gpt" ? "Gpt" : "Llama", "Top", v.k, v.drop_tokens ? "CapacityBound" : "Dropless",
                          v.checkpointed ? "Checkpointed" : "", v.dtype == torch::kFloat ? "" : "Bf16");
    });

TEST(MoeModelParityHarnessTest, ABrokenBackwardExchangeIsCaught) {
  const MoeVariant v{.family = "gpt", .k = 2, .drop_tokens = false};
  InProcessStore store;
  std::vector<BackwardResult> reference = RunMoeModel(store, 0, 1, v);
  BreakExpertExchangeBackwardForTesting(true);
  std::vector<BackwardResult> broken = RunMoeModel(store, 1, 2, v);
  BreakExpertExchangeBackwardForTesting(false);
  EXPECT_FALSE(CompareBackward(broken, reference, 1e-5).empty());
}

// The auxiliary loss is in the loss, and its gradient reaches the router
// through the recomputation of a checkpointed block: with and without
// checkpointing the router's gradient is the same (and not zero).
TEST(MoeModelTest, CheckpointingKeepsTheAuxiliaryGradient) {
  std::vector<torch::Tensor> gradients;
  for (int64_t checkpointed : {0, 4}) {
    GptOptions options = FourBlockGpt();
    options.checkpointed_blocks = checkpointed;
    options.moe.gating = GatingOptions{.num_experts = kExperts, .top_k = 1, .drop_tokens = false};
    options.moe.aux_loss_coef = 10;  // dominant, so a lost auxiliary gradient shows
    Gpt gpt(options, 5);
    gpt->train();
    torch::Tensor tokens = (torch::arange(2 * kMoeTime) % kMoeVocab).view({2, kMoeTime});
    gpt->Loss(tokens, tokens).backward();
    auto* block = (*gpt->blocks)[1]->as<GptBlock>();
    ASSERT_TRUE(block->moe);
    gradients.push_back(block->moe->gate_weight().grad().clone());
  }
  EXPECT_GT(gradients[0].abs().sum().item<double>(), 0);
  EXPECT_TRUE(torch::allclose(gradients[0], gradients[1], 1e-5, 1e-7));
}

TEST(MoeModelTest, ExpertLayersAreWhereEverySays) {
  GptOptions options;
  options.layers = 4;
  options.moe.gating.num_experts = 2;
  options.moe.every = 2;
  Gpt gpt(options, 1);
  std::vector<bool> expert;
  for (const auto& block : *gpt->blocks) expert.push_back(static_cast<bool>(block->as<GptBlock>()->moe));
  EXPECT_EQ(expert, (std::vector<bool>{false, true, false, true}));
  EXPECT_NE(gpt->named_parameters().find("blocks.1.moe.experts.1.fc_projection.weight"), nullptr);
  EXPECT_EQ(gpt->named_parameters().find("blocks.1.fc.weight"), nullptr);

  LlamaOptions llama_options;
  llama_options.moe.gating.num_experts = 3;
  Llama llama(llama_options, 1);
  // Mixtral's names, as in its Hugging Face checkpoints.
  for (const char* name :
       {"model.layers.0.block_sparse_moe.gate.weight", "model.layers.1.block_sparse_moe.experts.2.w1.weight",
        "model.layers.1.block_sparse_moe.experts.0.w2.weight", "model.layers.1.block_sparse_moe.experts.1.w3.weight"}) {
    EXPECT_NE(llama->named_parameters().find(name), nullptr) << name;
  }
}

TEST(MoeModelTest, RefusesTensorParallelism) {
  InProcessStore store;
  store.RunRanks(2, [](int rank, Communicator& comm) {
    GptOptions options;
    options.moe.gating.num_experts = 2;
    options.tensor_parallel = TensorParallelGroup{&comm, rank, 2};
    try {
      Gpt gpt(options, 1);
      ADD_FAILURE() << "built";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("model.moe with tensor parallelism"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace dslaunch::runtime
