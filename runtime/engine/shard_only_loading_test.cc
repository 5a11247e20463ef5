// Note [Shard-only loading]: a Llama built deferred (no values) and filled
// by the ZeRO-3 engine from a source, each rank reading only its pieces,
// trains exactly like one process that built the same model whole: full
// fine-tuning and LoRA at DP 2, LoRA beside tensor parallelism with the
// shards on the host, and in bf16. Every element of the model is read once
// over all ranks, and a deferred model is refused by an engine that could
// not fill it.
#include <string>

#include "gtest/gtest.h"
#include "runtime/engine/engine.h"
#include "runtime/model/seeded_parameter_source.h"
#include "runtime/testing/tensor_parallel_training.h"

namespace dslaunch::runtime {
namespace {

using testing::ExpectSameTrainingAsOneProcess;
using testing::TensorParallelLayout;

TensorParallelLayout Deferred(int tp, int dp, bool lora) {
  TensorParallelLayout layout{"llama", tp, dp, /*stage=*/3};
  layout.lora = lora;
  layout.deferred = true;
  return layout;
}

TEST(ShardOnlyLoadingTest, TrainsLikeOneProcessThatBuiltTheModelWhole) {
  ExpectSameTrainingAsOneProcess(Deferred(1, 2, /*lora=*/false));
  ExpectSameTrainingAsOneProcess(Deferred(1, 2, /*lora=*/true));
  TensorParallelLayout beside_tensor_parallelism = Deferred(2, 2, /*lora=*/true);
  beside_tensor_parallelism.offload_param = true;
  ExpectSameTrainingAsOneProcess(beside_tensor_parallelism);
  TensorParallelLayout bf16 = Deferred(1, 2, /*lora=*/false);
  bf16.bf16 = true;
  ExpectSameTrainingAsOneProcess(bf16, /*steps=*/2);
  // Units below the persistence threshold (here the final norm and head's
  // and the embedding's) are gathered from every rank's pieces at once.
  TensorParallelLayout persistent = Deferred(1, 2, /*lora=*/false);
  persistent.persistence_threshold = 2000;
  ExpectSameTrainingAsOneProcess(persistent);
}

// A model that starts from its seed (SeededParameterSource): each rank
// replays the random draws and keeps its pieces, and trains exactly like
// one process that built the model whole. The GPT at DP 2 and at TP 2 x
// DP 2 (its vocabulary padded and split), the Llama with LoRA (the
// adapters drawn as before, after the base).
TEST(ShardOnlyLoadingTest, ModelsDrawnFromTheirSeedTrainLikeOneProcess) {
  TensorParallelLayout gpt{"gpt", 1, 2, /*stage=*/3};
  gpt.deferred = true;
  ExpectSameTrainingAsOneProcess(gpt);
  gpt.tp = 2;
  ExpectSameTrainingAsOneProcess(gpt);
  TensorParallelLayout llama = Deferred(1, 2, /*lora=*/true);
  llama.seeded = true;
  ExpectSameTrainingAsOneProcess(llama);
}

// Reads must follow the draws: a tensor already passed is refused by name.
TEST(ShardOnlyLoadingTest, SeededValuesAreDrawnOnceInParameterOrder) {
  GptOptions options = testing::TinyGpt();
  options.deferred = true;
  Gpt model(options, 3);
  SeededParameterSource source(*model, model->TensorParallelForms(), TensorParallelGroup{}, model->InitialValues(3));
  Gpt whole(testing::TinyGpt(), 3);
  auto parameters = whole->named_parameters();
  torch::Tensor out = torch::empty({4});
  ASSERT_TRUE(source.Read("blocks.0.attention.qkv.weight", 2, out).ok());
  EXPECT_TRUE(torch::equal(out, parameters["blocks.0.attention.qkv.weight"].reshape({-1}).narrow(0, 2, 4)));
  ASSERT_TRUE(source.Read("blocks.0.attention.qkv.weight", 10, out).ok());  // the same tensor again
  EXPECT_TRUE(torch::equal(out, parameters["blocks.0.attention.qkv.weight"].reshape({-1}).narrow(0, 10, 4)));
  absl::Status back = source.Read("token_embedding.weight", 0, out);
  EXPECT_NE(std::string(back.message()).find("'token_embedding.weight' read after"), std::string::npos) << back;
  ASSERT_TRUE(source.Read("final_norm.weight", 0, out).ok());
  EXPECT_TRUE(torch::equal(out, torch::ones({4})));
}

TEST(ShardOnlyLoadingTest, EachElementIsReadOnceOverTheRanksAndTheModelIsNeverWhole) {
  for (bool lora : {false, true}) {
    for (int dp : {2, 4}) {
      const TensorParallelLayout layout = Deferred(1, dp, lora);
      std::vector<int64_t> read(dp, 0);
      int64_t deferred_elements = 0;
      testing::RunTensorParallelRanks(layout, [&](int rank, const ParallelState& state) {
        testing::TensorParallelRank r = testing::StartTensorParallelRank(layout, state);
        ASSERT_NE(r.engine, nullptr);
        read[rank] = r.source->elements_read();
        int64_t base = 0;
        for (const auto& item : r.module->named_parameters()) {
          // Adapters are built with values; everything else was deferred
          // and is released again (no unit is persistent here).
          if (item.value().requires_grad() && lora) continue;
          base += item.value().numel();
          EXPECT_EQ(item.value().storage().nbytes(), 0u) << item.key();
        }
        if (rank == 0) deferred_elements = base;
      });
      int64_t total = 0;
      for (int rank = 0; rank < dp; ++rank) {
        total += read[rank];
        // Its pieces: at most 1/dp of the model plus a unit's padding each.
        EXPECT_LE(read[rank], deferred_elements / dp + 6) << layout.Describe() << ", rank " << rank;
      }
      EXPECT_EQ(total, deferred_elements) << layout.Describe();
    }
  }
}

TEST(ShardOnlyLoadingTest, ADeferredModelNeedsAStageThreeEngineWithASource) {
  for (int stage : {0, 2, 3}) {
    TensorParallelLayout layout = Deferred(1, 1, /*lora=*/false);
    layout.stage = stage;
    ModelInterface* family = nullptr;
    auto model = testing::BuildTensorParallelModel(layout, TensorParallelGroup{}, &family);
    auto engine = Engine::Create(model, testing::TensorParallelConfig(layout), ParallelState::DataParallelOnly(nullptr),
                                 torch::kCPU);
    ASSERT_FALSE(engine.ok()) << "stage " << stage;
    EXPECT_NE(std::string(engine.status().message()).find("parameter 'model.embed_tokens.weight' (and "),
              std::string::npos)
        << engine.status();
    EXPECT_NE(std::string(engine.status().message()).find(absl::StrCat("zero_optimization.stage=", stage)),
              std::string::npos)
        << engine.status();
  }
}

}  // namespace
}  // namespace dslaunch::runtime
