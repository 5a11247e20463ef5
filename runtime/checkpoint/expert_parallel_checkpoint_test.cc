// Checkpoints of expert-parallel runs (Note [Expert-parallel checkpoints]): an
// EP 2 x DP 2 ZeRO-2 run of a Mixtral-style model saved after 2 steps
// resumes bit for bit at the same layout, and loads at EP 4 (ZeRO 1), EP 1
// (ZeRO 2) and EP 2 at stage 0 to continue as the uninterrupted run does, up
// to the order of sums (1e-5 relative); and consolidates to every parameter
// the run saved.
#include <unistd.h>

#include <cstdlib>

#include "gtest/gtest.h"
#include "runtime/checkpoint/consolidate.h"
#include "runtime/checkpoint/engine_checkpointer.h"
#include "runtime/testing/expert_parallel_training.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {
namespace {

using testing::ExpertLayout;
using testing::InProcessStore;

struct Continued {
  std::vector<std::vector<double>> losses;      // per rank: the steps after the checkpoint
  std::map<std::string, torch::Tensor> params;  // every parameter, from whichever rank holds it
};

// Trains `layout` for `before` steps and saves to `dir`, or loads `dir`'s
// checkpoint; then trains 2 more steps.
Continued TrainAround(InProcessStore& store, int attempt, const ExpertLayout& layout, const std::string& dir, bool load,
                      int before) {
  Continued out;
  out.losses.resize(layout.world);
  std::vector<std::map<std::string, torch::Tensor>> params(layout.world);
  testing::RunExpertParallelRanks(store, attempt, layout.world, layout.ep, [&](int rank, const ParallelState& state) {
    testing::ExpertRank r = testing::StartExpertRank(layout, state);
    ASSERT_NE(r.engine, nullptr);
    std::vector<double> ignored;
    if (load) {
      auto client = EngineCheckpointer(*r.engine).Load(dir, "");
      ASSERT_TRUE(client.ok()) << client.status();
      EXPECT_EQ(r.engine->global_steps(), before);
    } else {
      testing::TrainExpertSteps(r, layout, state, 0, before, &ignored);
      absl::Status saved = EngineCheckpointer(*r.engine).Save(dir, "global_step2", {{"consumed", before}});
      ASSERT_TRUE(saved.ok()) << saved;
    }
    testing::TrainExpertSteps(r, layout, state, before, 2, &out.losses[rank]);
    params[rank] = testing::NamedParameters(*r.module);
  });
  for (const auto& rank : params) out.params.insert(rank.begin(), rank.end());
  return out;
}

class ExpertParallelCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ep-checkpoint-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  // Not std::filesystem: see runtime/fs/file_system.h (it jumped to address 0 on LibTorch 2.11).
  void TearDown() override { EXPECT_TRUE(FileSystem::Default().RemoveTree(dir_).ok()); }
  std::string dir_;
};

TEST_F(ExpertParallelCheckpointTest, ResumesExactlyAndLoadsAtOtherExpertParallelSizes) {
  InProcessStore store;
  const ExpertLayout saved{.family = "llama", .ep = 2, .stage = 2};
  Continued uninterrupted = TrainAround(store, 0, saved, dir_, /*load=*/false, 2);

  Continued resumed = TrainAround(store, 1, saved, dir_, /*load=*/true, 2);
  EXPECT_EQ(resumed.losses, uninterrupted.losses);
  for (const auto& [name, value] : uninterrupted.params) {
    EXPECT_TRUE(torch::equal(resumed.params.at(name), value)) << name;
  }

  int attempt = 2;
  for (ExpertLayout other :
       {ExpertLayout{.family = "llama", .ep = 4, .stage = 1}, ExpertLayout{.family = "llama", .ep = 1, .stage = 2},
        ExpertLayout{.family = "llama", .ep = 2, .stage = 0}}) {
    SCOPED_TRACE(other.Describe());
    Continued loaded = TrainAround(store, attempt++, other, dir_, /*load=*/true, 2);
    for (int rank = 0; rank < saved.world; ++rank) {
      for (size_t i = 0; i < loaded.losses[rank].size(); ++i) {
        EXPECT_NEAR(loaded.losses[rank][i], uninterrupted.losses[rank][i], 1e-5) << "rank " << rank;
      }
    }
    std::vector<std::string> bad = testing::CompareNamed(loaded.params, uninterrupted.params, 1e-5);
    EXPECT_TRUE(bad.empty()) << bad.size() << " mismatches, first: " << bad.front();
    EXPECT_EQ(loaded.params.size(), uninterrupted.params.size());
  }
}

// Consolidation (dsconsolidate, and what dsgen/dsserve --checkpoint read):
// the dense parameters and every expert, each once, as the run held them
// when it saved, at ZeRO 2 and at stage 0.
TEST_F(ExpertParallelCheckpointTest, ConsolidatesToEveryParameterTheRunSaved) {
  InProcessStore store;
  int attempt = 0;
  for (ExpertLayout layout :
       {ExpertLayout{.family = "llama", .ep = 2, .stage = 2}, ExpertLayout{.family = "llama", .ep = 2, .stage = 0}}) {
    SCOPED_TRACE(layout.Describe());
    const std::string dir = dir_ + "/" + std::to_string(attempt);
    std::vector<std::map<std::string, torch::Tensor>> params(layout.world);
    testing::RunExpertParallelRanks(store, attempt++, layout.world, layout.ep, [&](int rank, const ParallelState& state) {
      testing::ExpertRank r = testing::StartExpertRank(layout, state);
      ASSERT_NE(r.engine, nullptr);
      std::vector<double> ignored;
      testing::TrainExpertSteps(r, layout, state, 0, 2, &ignored);
      absl::Status saved = EngineCheckpointer(*r.engine).Save(dir, "global_step2", {});
      ASSERT_TRUE(saved.ok()) << saved;
      params[rank] = testing::NamedParameters(*r.module);
    });
    std::map<std::string, torch::Tensor> whole;
    for (const auto& rank : params) whole.insert(rank.begin(), rank.end());
    auto tensors = ConsolidateCheckpointInMemory(dir, "");
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    EXPECT_EQ(tensors->size(), whole.size());
    for (const auto& [name, value] : *tensors) {
      ASSERT_TRUE(whole.count(name)) << name << " is not the model's";
      const torch::Tensor want = whole.at(name).to(torch::kFloat);
      ASSERT_EQ(value.sizes(), want.sizes()) << name;
      EXPECT_TRUE(torch::equal(value, want)) << name << " differs by " << (value - want).abs().max().item<double>();
    }
  }
}

TEST_F(ExpertParallelCheckpointTest, NvmeOffloadedExpertsResumeBitForBitAndLoadIntoCpuOffload) {
  // Note [NVMe offload] for both partitions (the experts' swap files in a
  // folder of their own): the NVMe run steps as CPU offload does, bit for
  // bit, and its checkpoint resumes into NVMe and into CPU offload alike.
  // Swap files need a real file system: a folder beside the test, not /tmp.
  char cwd[4096] = {0};
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  const std::string nvme = std::string(cwd) + "/ep-nvme-" + std::to_string(::getpid());
  ASSERT_TRUE(FileSystem::Default().CreateDirectories(nvme).ok());
  InProcessStore store;
  ExpertLayout cpu{.family = "llama", .ep = 2, .stage = 2, .offload = "cpu"};
  ExpertLayout swapped = cpu;
  swapped.offload = "nvme";
  swapped.nvme_path = nvme;
  Continued on_cpu = TrainAround(store, 0, cpu, dir_ + "/cpu", /*load=*/false, 2);
  Continued uninterrupted = TrainAround(store, 1, swapped, dir_ + "/nvme", /*load=*/false, 2);
  EXPECT_EQ(uninterrupted.losses, on_cpu.losses);
  for (const auto& [name, value] : on_cpu.params) EXPECT_TRUE(torch::equal(uninterrupted.params.at(name), value)) << name;
  int attempt = 2;
  for (const ExpertLayout& into : {swapped, cpu}) {
    SCOPED_TRACE(into.Describe());
    Continued resumed = TrainAround(store, attempt++, into, dir_ + "/nvme", /*load=*/true, 2);
    EXPECT_EQ(resumed.losses, uninterrupted.losses);
    for (const auto& [name, value] : uninterrupted.params) {
      EXPECT_TRUE(torch::equal(resumed.params.at(name), value)) << name;
    }
  }
  // Every rank's folders, dense and experts', went with its engine.
  auto left = FileSystem::Default().ListDirectory(nvme + "/dslaunch-swap");
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->empty());
  EXPECT_TRUE(FileSystem::Default().RemoveTree(nvme).ok());
}

}  // namespace
}  // namespace dslaunch::runtime
