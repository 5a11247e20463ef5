// Note [Parameters on NVMe]: ZeRO-3's parameter shard in swap files
// (offload_param.device: nvme) against the same shard in host memory
// (offload_param.device: cpu), through the engine: the same arithmetic, so
// equal bit for bit, with every optimizer placement, on 1 and 2 ranks,
// through io_uring and pread/pwrite; checkpoints resume bit for bit into
// either placement; a changed or truncated file stops the gather naming it.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/rank_contract.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/engine_checkpointer.h"
#include "runtime/engine/engine.h"
#include "runtime/estimate/memory_estimate.h"
#include "runtime/fs/file_system.h"
#include "runtime/model/gpt.h"
#include "runtime/testing/disk_test_folder.h"
#include "runtime/testing/zero_training.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;
using testing::Batch;
using testing::MaxDifference;
using testing::TinyGpt;
using zero_testing::Config;
using zero_testing::Train;
using zero_testing::TrainedParameters;
using zero_testing::ZeroTest;

// Stage 3 with the parameter shard on `params` ("cpu" or "nvme") and the
// optimizer on `optimizer` ("none", "cpu" or "nvme"), swap files under `path`.
DsConfig Placement(int world, const std::string& params, const std::string& optimizer, const std::string& path) {
  DsConfig config = Config(3, 8 / world, 1, world);
  config.zero_optimization.offload_param.device = params;
  if (params == "nvme") config.zero_optimization.offload_param.nvme_path = path;
  config.zero_optimization.offload_optimizer.device = optimizer;
  if (optimizer == "nvme") config.zero_optimization.offload_optimizer.nvme_path = path;
  config.zero_optimization.sub_group_size = 1000;  // sub-groups that cut across units
  config.aio.block_size = 8192;
  config.aio.queue_depth = 4;
  return config;
}

struct Trained {
  std::vector<double> losses;
  std::vector<torch::Tensor> params;
};

TEST_F(ZeroTest, ParametersOnNvmeTrainBitForBitAsOnTheHost) {
  testing::DiskTestFolder folder("params-nvme-test");
  // Persistence 0: every unit gathered from its file; the default keeps the
  // tiny model's small units whole, re-read from their files after a step.
  for (int64_t persistence : {int64_t{0}, int64_t{2000}}) {
    for (int world : {1, 2}) {
      for (const std::string optimizer : {"none", "cpu", "nvme"}) {
        for (bool bf16 : {false, true}) {
          if (bf16 && (optimizer != "cpu" || persistence != 0)) continue;
          std::map<std::string, Trained> runs;
          // "split": max_in_cpu keeps the first units' pieces that fit in
          // host memory (the embeddings', the final norm's), the blocks'
          // on the drive.
          for (const std::string params : {"cpu", "nvme", "pread", "split"}) {
            if (params == "pread" && (world != 2 || optimizer != "nvme" || persistence != 0)) continue;
            if (params == "split" && (persistence != 0 || optimizer == "nvme" || bf16)) continue;
            if (params == "pread") ::setenv(rank_env::kNoIoUring, "1", 1);
            RunRanks(world, [&](int rank, Communicator* comm) {
              DsConfig config = Placement(world, params == "cpu" ? "cpu" : "nvme", optimizer, folder.path());
              config.zero_optimization.stage3_param_persistence_threshold = persistence;
              if (params == "split") config.zero_optimization.offload_param.max_in_cpu = 2000;
              config.bf16.enabled = bf16;
              Gpt model(TinyGpt(), 29);
              auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
              ASSERT_TRUE(engine.ok()) << engine.status();
              const Engine::MemoryBreakdown memory = (*engine)->Memory();
              EXPECT_TRUE(memory.parameters_on_host);
              if (params == "split") {
                EXPECT_GT(memory.parameters_in_host_memory, 0);
                EXPECT_LE(memory.parameters_in_host_memory, 2000 * 4);
                EXPECT_GT(memory.parameters_on_nvme, 0);
                EXPECT_THAT((*engine)->NvmeOffloadDescription(), HasSubstr("in host memory"));
              } else if (params != "cpu") {
                // Every element of the shard is on the drive, none in memory
                // but the units kept whole.
                const int64_t element = bf16 ? 2 : 4;
                EXPECT_EQ(memory.parameters_in_host_memory, 0);
                EXPECT_GE(memory.parameters_on_nvme, element * (memory.gradients / element));
                EXPECT_GT(memory.parameter_staging, 0);
                if (persistence == 0) {
                  EXPECT_EQ(memory.parameters, 0);
                }
                const std::string described = (*engine)->NvmeOffloadDescription();
                EXPECT_THAT(described, HasSubstr("parameters: "));
                EXPECT_THAT(described, HasSubstr(params == "pread" ? "pread/pwrite" : "io_uring"));
              } else {
                EXPECT_EQ(memory.parameters_on_nvme, 0);
              }
              Trained trained{Train(**engine, model, 0, 3, 1, world, rank), TrainedParameters(**engine, model)};
              if (rank == 0) runs[params] = trained;
            });
            ::unsetenv(rank_env::kNoIoUring);
          }
          const std::string what = absl::StrCat("persistence ", persistence, " world ", world, " optimizer ",
                                                optimizer, bf16 ? " bf16" : " fp32");
          for (const auto& [params, run] : runs) {
            if (params == "cpu") continue;
            EXPECT_EQ(run.losses, runs["cpu"].losses) << what << " " << params;
            EXPECT_EQ(MaxDifference(run.params, runs["cpu"].params), 0.0) << what << " " << params;
          }
        }
      }
    }
  }
  // Every rank's folder went with its engine.
  auto left = FileSystem::Default().ListDirectory(folder.path() + "/dslaunch-swap");
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_THAT(*left, ::testing::IsEmpty());
}

// Note [Memory estimate]: `dslaunch estimate`'s ZeRO-Infinity rows name what
// the engine holds, within each unit's padding and its file's header.
TEST_F(ZeroTest, TheEstimateNamesWhatNvmeOffloadHolds) {
  testing::DiskTestFolder folder("params-nvme-estimate");
  struct Case {
    int stage;
    std::string params, optimizer;
  };
  for (const Case& c : {Case{2, "none", "nvme"}, Case{3, "cpu", "nvme"}, Case{3, "nvme", "nvme"},
                        Case{3, "nvme", "cpu"}}) {
    for (int world : {1, 2}) {
      const std::string what = absl::StrCat("stage ", c.stage, " params ", c.params, " optimizer ", c.optimizer,
                                            " world ", world);
      RunRanks(world, [&](int rank, Communicator* comm) {
        DsConfig config = Placement(world, c.params == "none" ? "cpu" : c.params, c.optimizer, folder.path());
        config.zero_optimization.stage = c.stage;
        config.zero_optimization.stage3_param_persistence_threshold = 0;
        if (c.params == "none") config.zero_optimization.offload_param.device = "none";
        Gpt model(TinyGpt(), 29);
        auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
        ASSERT_TRUE(engine.ok()) << engine.status();
        const Engine::MemoryBreakdown m = (*engine)->Memory();
        if (rank != 0) return;
        ModelSize size;
        size.trainable = model->ParameterCount();
        ZeroSetting setting{c.stage, true, c.params != "none"};
        setting.optimizer_nvme = c.optimizer == "nvme";
        setting.param_nvme = c.params == "nvme";
        setting.sub_group_elements = config.zero_optimization.sub_group_size;
        const RankStates predicted = DslaunchRankStates(size, setting, world, 4);
        // Each unit pads its piece to the world's multiple; each file has a header and pads to 4096.
        const double padding = 4.0 * world * std::max(1, m.partition_units) * 3;
        EXPECT_NEAR(m.swapped_to_nvme, predicted.swapped_to_nvme, padding + 3 * kSwapAlignment * 2) << what;
        EXPECT_NEAR(m.swap_buffers, predicted.swap_buffers, padding + 3 * 3 * kSwapAlignment * 2) << what;
        EXPECT_NEAR(m.host_parameter_copy, predicted.host_parameter_copy, padding) << what;
        EXPECT_NEAR(m.parameters_on_nvme, predicted.parameter_files,
                    padding + 2.0 * kSwapAlignment * std::max(1, m.partition_units))
            << what;
      });
    }
  }
}

TEST_F(ZeroTest, ParametersOnNvmeCheckpointsResumeBitForBitIntoEitherPlacement) {
  testing::DiskTestFolder folder("params-nvme-test");
  const DsConfig nvme = Placement(2, "nvme", "nvme", folder.path());
  const DsConfig cpu = Placement(2, "cpu", "nvme", folder.path());
  ExpectResumeBitForBit(folder.path() + "/ckpt", nvme, {{"nvme", nvme}, {"cpu", cpu}}, /*steps=*/2, /*seed=*/7);
  // And from the host into the drive, with the optimizer on the host.
  ExpectResumeBitForBit(folder.path() + "/ckpt", Placement(2, "cpu", "cpu", folder.path()),
                        {{"nvme", Placement(2, "nvme", "cpu", folder.path())}}, /*steps=*/2, /*seed=*/7);
}

// The next forward gathers from the files: a flipped bit or a short file is
// an error naming the file, never a wrong weight.
TEST_F(ZeroTest, AChangedOrTruncatedParameterFileStopsTheGatherNamingIt) {
  for (bool truncate : {false, true}) {
    testing::DiskTestFolder folder("params-nvme-test");
    Gpt model(TinyGpt(), 3);
    auto engine = Engine::Create(model.ptr(), Placement(1, "nvme", "cpu", folder.path()),
                                 ParallelState::DataParallelOnly(nullptr), torch::kCPU);
    ASSERT_TRUE(engine.ok()) << engine.status();
    Train(**engine, model, 0, 1, 1, 1, 0);
    const std::string file = folder.path() + "/dslaunch-swap/job-rank0-params/piece.1.swp";
    ASSERT_TRUE(FileSystem::Default().Exists(file)) << file;
    if (truncate) {
      ASSERT_EQ(::truncate(file.c_str(), 4096 + 512), 0) << file;
    } else {
      testing::FlipBitsInFile(file, 4096 + 12, 0x04);
    }
    auto [inputs, targets] = Batch(0, 8);
    try {
      torch::Tensor loss = model->Loss(inputs, targets);
      ADD_FAILURE() << "the forward read a " << (truncate ? "truncated" : "changed") << " file";
    } catch (const c10::Error& e) {
      EXPECT_THAT(e.what_without_backtrace(), HasSubstr(file)) << truncate;
      EXPECT_THAT(e.what_without_backtrace(), HasSubstr(truncate ? "short" : "checksum mismatch"));
    }
  }
}

// A step that fails between the NVMe optimizer's sub-groups has stored some
// units' new values and not the others': the files are stale, the next
// gather refuses them, and a checkpoint load (which rewrites every file)
// brings the engine back to the saved step.
TEST_F(ZeroTest, AStepThatFailsPartWayLeavesTheFilesRefusedUntilACheckpointLoads) {
  testing::DiskTestFolder folder("params-nvme-test");
  Gpt model(TinyGpt(), 3);
  auto engine = Engine::Create(model.ptr(), Placement(1, "nvme", "nvme", folder.path()),
                               ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(engine.ok()) << engine.status();
  Train(**engine, model, 0, 1, 1, 1, 0);
  const std::string checkpoint = folder.path() + "/ckpt";
  ASSERT_TRUE(EngineCheckpointer(**engine).Save(checkpoint, "saved", {}).ok());
  const std::vector<double> after_save = Train(**engine, model, 1, 1, 1, 1, 0);
  // The last sub-group's second moment changes on the drive.
  auto files = FileSystem::Default().ListDirectory(folder.path() + "/dslaunch-swap/job-rank0");
  ASSERT_TRUE(files.ok()) << files.status();
  int last = -1;
  for (const std::string& file : *files) {
    int group = -1;
    if (std::sscanf(file.c_str(), "exp_avg_sq.%d.swp", &group) == 1) last = std::max(last, group);
  }
  ASSERT_GT(last, 0) << "several sub-groups";
  testing::FlipBitsInFile(folder.path() + "/dslaunch-swap/job-rank0/exp_avg_sq." + std::to_string(last) + ".swp",
                          4096 + 4, 0x7f);
  auto [inputs, targets] = Batch(16, 8);
  ASSERT_TRUE((*engine)->Backward(model->Loss(inputs, targets)).ok());
  ASSERT_FALSE((*engine)->Step().ok());
  try {
    torch::Tensor loss = model->Loss(inputs, targets);
    ADD_FAILURE() << "the forward gathered from part-updated files";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("part-updated; load a checkpoint"));
  }
  // Nor a step on top of the failed one's half, nor a checkpoint of it.
  auto again = (*engine)->Step();
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(std::string(again.status().message()), HasSubstr("part-updated"));
  const absl::Status saved = EngineCheckpointer(**engine).Save(folder.path() + "/half", "half", {});
  ASSERT_FALSE(saved.ok());
  EXPECT_THAT(std::string(saved.message()), HasSubstr("part-updated"));
  // The load rewrites every file: the step after the save again, the same.
  auto loaded = EngineCheckpointer(**engine).Load(checkpoint);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(Train(**engine, model, 1, 1, 1, 1, 0), after_save);
}

// Refused where it cannot work, by the key that asks for it.
TEST_F(ZeroTest, ParametersOnNvmeRefuseAFolderTheyCannotUseAndTheDelayedUpdate) {
  testing::DiskTestFolder folder("params-nvme-test");
  Gpt model(TinyGpt(), 3);
  DsConfig missing = Placement(1, "nvme", "cpu", folder.path() + "/nope");
  auto refused = Engine::Create(model.ptr(), missing, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("zero_optimization.offload_param.nvme_path=" + folder.path() + "/nope is not a folder"));
  DsConfig delayed = Placement(1, "nvme", "cpu", folder.path());
  delayed.zero_optimization.offload_optimizer.delay_update = true;
  refused = Engine::Create(model.ptr(), delayed, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("delay_update with offload_param.device=nvme"));
}

}  // namespace
}  // namespace dslaunch::runtime
