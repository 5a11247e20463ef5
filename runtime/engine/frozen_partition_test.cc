// Note [Frozen parameters at ZeRO-3]: at stage 3 the parameters that do not
// train (LoRA's base) are partitioned like the trainable ones and gathered
// with the same units, so each rank keeps 1/N of the base. Training matches
// one process step for step (the gathered base is the base: a wrong gather
// shows in the losses and in the whole parameters compared after the steps),
// at DP 2 and 4, beside tensor parallelism, and with the shards on the host.
#include <string>

#include "gtest/gtest.h"
#include "runtime/engine/engine.h"
#include "runtime/testing/tensor_parallel_training.h"
#include "runtime/zero/zero_partition.h"

namespace dslaunch::runtime {
namespace {

using testing::ExpectSameTrainingAsOneProcess;
using testing::TensorParallelLayout;

TensorParallelLayout LoraAtStageThree(int tp, int dp) {
  TensorParallelLayout layout{"llama", tp, dp, /*stage=*/3};
  layout.lora = true;
  return layout;
}

TEST(FrozenPartitionTest, LoraAtStageThreeMatchesOneProcess) {
  ExpectSameTrainingAsOneProcess(LoraAtStageThree(1, 2));
  ExpectSameTrainingAsOneProcess(LoraAtStageThree(1, 4));
  TensorParallelLayout beside_tensor_parallelism = LoraAtStageThree(2, 2);
  beside_tensor_parallelism.offload_param = true;
  ExpectSameTrainingAsOneProcess(beside_tensor_parallelism);
}

// Bytes of the frozen parameters' logical sizes (whole, on one rank).
int64_t WholeFrozenBytes(torch::nn::Module& module) {
  int64_t bytes = 0;
  for (const auto& p : module.parameters()) {
    if (!p.requires_grad()) bytes += p.numel() * p.element_size();
  }
  return bytes;
}

TEST(FrozenPartitionTest, EachRankKeepsItsShareOfTheFrozenBase) {
  for (int dp : {2, 4}) {
    for (bool offload_param : {false, true}) {
      TensorParallelLayout layout = LoraAtStageThree(1, dp);
      layout.offload_param = offload_param;
      testing::RunTensorParallelRanks(layout, [&](int rank, const ParallelState& state) {
        testing::TensorParallelRank r = testing::StartTensorParallelRank(layout, state);
        ASSERT_NE(r.engine, nullptr);
        const int64_t whole = WholeFrozenBytes(*r.module);
        // Each of the 4 units (embedding, 2 layers, norm and head) is padded
        // to a multiple of dp elements (fp32 here).
        const int64_t padding = 4 * (dp - 1) * 4;
        auto expect_share = [&](const char* when) {
          const Engine::MemoryBreakdown memory = r.engine->Memory();
          EXPECT_GE(memory.frozen_parameters * dp, whole) << when << ", dp " << dp;
          EXPECT_LE(memory.frozen_parameters * dp, whole + padding * dp) << when << ", dp " << dp;
          EXPECT_EQ(memory.parameters_on_host, offload_param);
          // A base weight's storage is released between its uses.
          for (const auto& item : r.module->named_parameters()) {
            if (item.key() == "model.layers.0.self_attn.q_proj.weight" || item.key() == "model.embed_tokens.weight") {
              EXPECT_EQ(item.value().storage().nbytes(), 0u) << when << ": " << item.key();
            }
          }
        };
        expect_share("before the first step");
        std::vector<double> losses;
        testing::TrainTensorParallelSteps(*r.engine, *r.family, layout, state, 0, 2, &losses);
        expect_share("after two steps");
        (void)rank;
      });
    }
  }
  // Stage 2 keeps the base whole on every rank.
  TensorParallelLayout stage2{"llama", 1, 2, /*stage=*/2};
  stage2.lora = true;
  testing::RunTensorParallelRanks(stage2, [&](int, const ParallelState& state) {
    testing::TensorParallelRank r = testing::StartTensorParallelRank(stage2, state);
    ASSERT_NE(r.engine, nullptr);
    EXPECT_EQ(r.engine->Memory().frozen_parameters, WholeFrozenBytes(*r.module));
  });
}

// A model whose units name only its trainable tensors (written before units
// had a frozen side), or only its frozen ones, is refused at stage 3: the
// other side would be partitioned into a unit no run gathers.
class UnitsWithoutOneSide : public LlamaImpl {
 public:
  UnitsWithoutOneSide(const LlamaOptions& options, bool frozen) : LlamaImpl(options, 3), frozen_(frozen) {}
  std::vector<ParameterUnit> ParameterUnits() const override {
    std::vector<ParameterUnit> units = LlamaImpl::ParameterUnits();
    for (ParameterUnit& unit : units) {
      if (frozen_) {
        unit.first_frozen = unit.frozen_count = 0;
      } else {
        unit.first_parameter = unit.parameter_count = 0;
      }
    }
    return units;
  }

 private:
  const bool frozen_;
};

TEST(FrozenPartitionTest, UnitsThatNameNoTensorOfASideAreRefused) {
  LlamaOptions options;
  options.layers = 2;
  options.hidden = 16;
  options.heads = 2;
  options.kv_heads = 2;
  options.head_dim = 8;
  options.intermediate = 24;
  options.vocab_size = 11;
  for (bool frozen : {true, false}) {
    auto model = std::make_shared<UnitsWithoutOneSide>(options, frozen);
    LoraSettings lora;
    lora.adapter.r = 2;
    lora.target_modules = {"q_proj"};
    ASSERT_TRUE(ApplyLora(*model, lora, 5).ok());
    DsConfig config = testing::TensorParallelConfig(LoraAtStageThree(1, 1));
    auto engine = Engine::Create(model, config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
    ASSERT_FALSE(engine.ok());
    const std::string field = frozen ? "(ParameterUnit::frozen_count)" : "(ParameterUnit::parameter_count)";
    EXPECT_NE(std::string(engine.status().message()).find("name none of them " + field), std::string::npos)
        << engine.status();
  }
}

TEST(FrozenPartitionTest, AFrozenPartitionIsStageThreesParameterShardAlone) {
  std::vector<torch::Tensor> params = {torch::ones({10})};
  ZeroOptions options;
  options.frozen = true;
  options.stage = 2;
  auto refused = ZeroPartition::Create(options, params, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("stage 3"), std::string::npos) << refused.status();
  options.stage = 3;
  options.offload_optimizer = true;
  EXPECT_FALSE(ZeroPartition::Create(options, params, nullptr).ok());
  options.offload_optimizer = false;
  auto frozen = ZeroPartition::Create(options, params, nullptr);
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  EXPECT_EQ((*frozen)->MasterBytes(), 0);
  EXPECT_EQ((*frozen)->GradientBytes(), 0);
  EXPECT_EQ((*frozen)->ParameterBytes(), 10 * 4);
  auto none = ZeroPartition::Create(options, {}, nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("no frozen parameters"), std::string::npos) << none.status();
}

}  // namespace
}  // namespace dslaunch::runtime
