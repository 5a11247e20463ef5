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
