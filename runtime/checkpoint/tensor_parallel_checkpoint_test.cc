// Checkpoints of tensor-parallel runs (Note [Tensor-parallel checkpoints]):
// a TP 2 x DP 2 run saved after 3 steps resumes bit for bit at the same
// layout, and loads at TP 1 (one process; two ranks at ZeRO 2) and at TP 4
// (ZeRO 3)
// to continue as the uninterrupted run does, up to the order of sums; and
// consolidates to the whole parameters the run saved.
#include <cstdlib>

#include "gtest/gtest.h"
#include "runtime/checkpoint/consolidate.h"
#include "runtime/checkpoint/engine_checkpointer.h"
#include "runtime/testing/tensor_parallel_training.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {
namespace {

using testing::TensorParallelLayout;

struct TensorParallelContinued {
  std::vector<double> losses;                   // the steps after the checkpoint
  std::map<std::string, torch::Tensor> params;  // whole, after them
};

// Trains `layout` for `before` steps (and saves to `dir` when `save`), or
// loads `dir`'s checkpoint first; then trains 2 more steps.
TensorParallelContinued TrainAround(const TensorParallelLayout& layout, const std::string& dir, bool load, int before) {
  std::vector<std::vector<double>> losses(layout.world());
  std::vector<std::map<std::string, torch::Tensor>> params(layout.world());
  testing::RunTensorParallelRanks(layout, [&](int rank, const ParallelState& state) {
    testing::TensorParallelRank r = testing::StartTensorParallelRank(layout, state);
    ASSERT_NE(r.engine, nullptr);
    Engine* engine = r.engine.get();
    std::vector<double> ignored;
    if (load) {
      auto client = EngineCheckpointer(*engine).Load(dir, "");
      ASSERT_TRUE(client.ok()) << client.status();
      EXPECT_EQ(client->at("consumed"), before * testing::kTensorParallelRowsPerStep);
      EXPECT_EQ(engine->global_steps(), before);
    } else {
      testing::TrainTensorParallelSteps(*engine, *r.family, layout, state, 0, before, &ignored);
      absl::Status saved =
          EngineCheckpointer(*engine).Save(dir, "global_step3", {{"consumed", before * testing::kTensorParallelRowsPerStep}});
      ASSERT_TRUE(saved.ok()) << saved;
    }
    testing::TrainTensorParallelSteps(*engine, *r.family, layout, state, before, 2, &losses[rank]);
    params[rank] = testing::WholeParameters(*engine, *r.module, *r.family, r.group);
  });
  return TensorParallelContinued{testing::MeanLosses(losses), params[0]};
}

// Trains `layout` for two steps, saves to `dir` with tag global_step2, and
// returns rank 0's whole parameters as the run held them when it saved.
std::map<std::string, torch::Tensor> TrainTwoStepsAndSave(const TensorParallelLayout& layout, const std::string& dir) {
  std::vector<std::map<std::string, torch::Tensor>> saved(layout.world());
  testing::RunTensorParallelRanks(layout, [&](int rank, const ParallelState& state) {
    testing::TensorParallelRank r = testing::StartTensorParallelRank(layout, state);
    ASSERT_NE(r.engine, nullptr);
    std::vector<double> ignored;
    testing::TrainTensorParallelSteps(*r.engine, *r.family, layout, state, 0, 2, &ignored);
    absl::Status written = EngineCheckpointer(*r.engine).Save(dir, "global_step2", {});
    ASSERT_TRUE(written.ok()) << written;
    saved[rank] = testing::WholeParameters(*r.engine, *r.module, *r.family, r.group);
  });
  return saved[0];
}

class TensorParallelCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tp-checkpoint-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  // Not std::filesystem: see runtime/fs/file_system.h (it jumped to address 0 on LibTorch 2.11).
  void TearDown() override { EXPECT_TRUE(FileSystem::Default().RemoveTree(dir_).ok()); }
  std::string dir_;
};

void ExpectClose(const TensorParallelContinued& got, const TensorParallelContinued& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * want.losses[i]) << what << ", step " << i;
  }
  for (const auto& [name, value] : want.params) {
    EXPECT_LE((got.params.at(name) - value).abs().max().item<double>(), 1e-4) << what << ": " << name;
  }
}

TEST_F(TensorParallelCheckpointTest, ResumesBitForBitAndLoadsAtOtherTensorParallelDegrees) {
  for (const std::string family : {"gpt", "llama"}) {
    const TensorParallelLayout saved_layout{family, 2, 2, 1};
    const std::string dir = dir_ + "/" + family;
    const TensorParallelContinued uninterrupted = TrainAround(saved_layout, dir, /*load=*/false, 3);
    ASSERT_EQ(uninterrupted.losses.size(), 2u);
    // One file per rank of the job.
    for (int file = 0; file < 4; ++file) {
      EXPECT_TRUE(FileSystem::Default().Stat(dir + "/global_step3/rank_" + std::to_string(file) + ".pt").ok()) << file;
    }

    const TensorParallelContinued same = TrainAround(saved_layout, dir, /*load=*/true, 3);
    EXPECT_EQ(same.losses, uninterrupted.losses) << family << ": the resume is not bit for bit";
    for (const auto& [name, value] : uninterrupted.params) {
      EXPECT_TRUE(torch::equal(same.params.at(name), value)) << family << ": " << name;
    }
    // (fp32 at ZeRO 0 keeps per-parameter optimizer state and loads only its
    // own kind of checkpoint: one process at ZeRO 1 instead.)
    ExpectClose(TrainAround(TensorParallelLayout{family, 1, 1, 1}, dir, true, 3), uninterrupted,
                family + " loaded at TP 1 (one process, ZeRO 1)");
    ExpectClose(TrainAround(TensorParallelLayout{family, 4, 1, 3}, dir, true, 3), uninterrupted,
                family + " loaded at TP 4 (ZeRO 3)");
    ExpectClose(TrainAround(TensorParallelLayout{family, 1, 2, 2}, dir, true, 3), uninterrupted,
                family + " loaded at TP 1 x DP 2 (ZeRO 2)");
  }
}

// Consolidation (dsconsolidate, and what dsgen/dsserve --checkpoint read)
// of a TP 2 x DP 2 checkpoint: every parameter whole, as the run held it
// when it saved (fused q/k/v slices, rows, a padded vocabulary trimmed).
TEST_F(TensorParallelCheckpointTest, ConsolidatesToTheWholeParametersTheRunSaved) {
  // ZeRO 1: one file per rank, each data-parallel rank a piece; ZeRO 0 in
  // bf16: the fp32 masters whole in each data-parallel rank's file.
  for (const auto& [family, stage] : {std::pair<std::string, int>{"gpt", 1}, {"llama", 1}, {"llama", 0}}) {
    SCOPED_TRACE(::testing::Message() << family << " at ZeRO " << stage);
    const TensorParallelLayout layout{family, 2, 2, stage, /*sequence_parallel=*/false, /*bf16=*/stage == 0};
    const std::string dir = dir_ + "/" + family + std::to_string(stage);
    const std::map<std::string, torch::Tensor> saved = TrainTwoStepsAndSave(layout, dir);
    ConsolidateSummary summary;
    auto tensors = ConsolidateCheckpointInMemory(dir, "", {}, &summary);
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    EXPECT_EQ(summary.ranks_read, stage == 0 ? 2 : 4) << family;
    ASSERT_EQ(tensors->size(), saved.size()) << family;
    for (const auto& [name, value] : *tensors) {
      ASSERT_TRUE(saved.count(name)) << family << ": " << name << " is not the model's";
      const torch::Tensor want = saved.at(name).to(torch::kFloat);
      // bf16 parameters are their fp32 masters rounded.
      const torch::Tensor got = layout.bf16 ? value.to(torch::kBFloat16).to(torch::kFloat) : value;
      ASSERT_EQ(got.sizes(), want.sizes()) << family << ": " << name;
      EXPECT_TRUE(torch::equal(got, want)) << family << ": " << name << " differs by "
                                           << (got - want).abs().max().item<double>();
    }
  }
}

// At ZeRO 0 every data-parallel rank's file holds its slice's masters whole
// (one "shard"): a TP 2 x DP 2 bf16 checkpoint loads at TP 1 with the
// parameters the run saved (the files of slice t are t·D .., not t·1).
TEST_F(TensorParallelCheckpointTest, AZeroStageZeroCheckpointLoadsAtAnotherTensorParallelDegree) {
  const TensorParallelLayout saved_layout{"llama", 2, 2, 0, /*sequence_parallel=*/false, /*bf16=*/true};
  const std::map<std::string, torch::Tensor> saved = TrainTwoStepsAndSave(saved_layout, dir_);
  const TensorParallelLayout one{"llama", 1, 1, 1, /*sequence_parallel=*/false, /*bf16=*/true};
  std::map<std::string, torch::Tensor> loaded;
  testing::RunTensorParallelRanks(one, [&](int, const ParallelState& state) {
    testing::TensorParallelRank r = testing::StartTensorParallelRank(one, state);
    ASSERT_NE(r.engine, nullptr);
    auto client = EngineCheckpointer(*r.engine).Load(dir_, "");
    ASSERT_TRUE(client.ok()) << client.status();
    loaded = testing::WholeParameters(*r.engine, *r.module, *r.family, r.group);
  });
  ASSERT_EQ(loaded.size(), saved.size());
  for (const auto& [name, value] : saved) {
    EXPECT_TRUE(torch::equal(loaded.at(name), value)) << name;
  }
}

}  // namespace
}  // namespace dslaunch::runtime
