// ZeRO stages 1, 2 and 3 against stage 0: the same losses and parameters,
// the memory the ZeRO formulas promise, and checkpoints that load at another
// data-parallel size (and stage). Offload (CPU, NVMe, the delayed update) is
// in zero_offload_test.cc.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/rank_contract.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/consolidate.h"
#include "runtime/checkpoint/engine_checkpointer.h"
#include "runtime/fs/file_system.h"
#include "runtime/engine/engine.h"
#include "runtime/estimate/memory_estimate.h"
#include "runtime/model/gpt.h"
#include "runtime/testing/rank_group.h"
#include "runtime/testing/zero_training.h"

namespace dslaunch::runtime {
namespace {

using testing::Batch;
using testing::MaxDifference;
using testing::Parameters;
using testing::TinyGpt;
using zero_testing::Config;
using zero_testing::Train;
using zero_testing::TrainedParameters;
using zero_testing::ZeroTest;

TEST_F(ZeroTest, StagesOneTwoAndThreeMatchStageZero) {
  Gpt reference_model(TinyGpt(), 21);
  auto reference = Engine::Create(reference_model.ptr(), Config(0, 8, 1, 1), ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(reference.ok());
  auto reference_losses = Train(**reference, reference_model, 0, 4, 1, 1, 0);
  auto reference_params = Parameters(reference_model);

  for (int stage : {1, 2, 3}) {
    for (int world : {1, 2, 4}) {
      for (int64_t accumulation : {1, 2}) {
        if (8 % (world * accumulation) != 0) continue;
        std::vector<std::vector<double>> losses(world);
        std::vector<std::vector<torch::Tensor>> params(world);
        RunRanks(world, [&](int rank, Communicator* comm) {
          Gpt model(TinyGpt(), 21);
          auto engine = Engine::Create(model.ptr(), Config(stage, 8 / (world * accumulation), accumulation, world),
                                       ParallelState::DataParallelOnly(comm), torch::kCPU);
          ASSERT_TRUE(engine.ok()) << engine.status();
          losses[rank] = Train(**engine, model, 0, 4, accumulation, world, rank);
          params[rank] = TrainedParameters(**engine, model);
        });
        for (int step = 0; step < 4; ++step) {
          double mean = 0;
          for (int rank = 0; rank < world; ++rank) mean += losses[rank][step] / world;
          // fp32; only the order of sums differs (bound justified in
          // engine_test.cc, DataParallelMatchesOneRank).
          EXPECT_NEAR(mean, reference_losses[step], 1e-5)
              << "stage " << stage << " world " << world << " gas " << accumulation << " step " << step;
        }
        for (int rank = 0; rank < world; ++rank) {
          EXPECT_LT(MaxDifference(params[rank], reference_params), 1e-4)
              << "stage " << stage << " world " << world << " gas " << accumulation;
          EXPECT_EQ(MaxDifference(params[rank], params[0]), 0.0);  // the all-gather keeps replicas identical
        }
      }
    }
  }
}

// Stage 0 with mixed precision runs through the flat machinery with one
// piece: every rank holds the whole reduced gradient, so its squared norm is
// not summed over the ranks again (that reported, and clipped at, a norm √N
// too large).
TEST_F(ZeroTest, StageZeroMixedPrecisionNormMatchesOneRank) {
  std::vector<std::vector<double>> norms(3);
  for (int world : {1, 2}) {
    RunRanks(world, [&](int rank, Communicator* comm) {
      Gpt model(TinyGpt(), 21);
      DsConfig config = Config(0, 8 / world, 1, world);
      config.bf16.enabled = true;
      auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(world > 1 ? comm : nullptr), torch::kCPU);
      ASSERT_TRUE(engine.ok()) << engine.status();
      for (int step = 0; step < 3; ++step) {
        auto [inputs, targets] = Batch(step * 8 + rank * (8 / world), 8 / world);
        ASSERT_TRUE((*engine)->Backward(model->Loss(inputs, targets)).ok());
        auto stepped = (*engine)->Step();
        ASSERT_TRUE(stepped.ok()) << stepped.status();
        if (rank == 0) norms[world].push_back(stepped->grad_norm);
      }
    });
  }
  ASSERT_EQ(norms[1].size(), 3u);
  ASSERT_EQ(norms[2].size(), 3u);
  for (int step = 0; step < 3; ++step) {
    // bf16 gradients of half batches summed: a few parts in a thousand.
    EXPECT_NEAR(norms[2][step], norms[1][step], 0.02 * norms[1][step]) << "step " << step;
  }
}

TEST_F(ZeroTest, MemoryFollowsTheZeroFormulas) {
  // bf16 mixed precision with Adam: Ψ parameters, N ranks. Stage 0: 16Ψ;
  // stage 1: 4Ψ + 12Ψ/N; stage 2: 2Ψ + 14Ψ/N; stage 3: 16Ψ/N. Every unit
  // (the buckets of reduce_bucket_size at stages 1-2, the model's four units
  // at stage 3) is padded to a multiple of N, so allow N elements' worth of
  // bytes per unit and term.
  for (int world : {1, 2, 4}) {
    for (int stage : {0, 1, 2, 3}) {
      std::vector<Engine::MemoryBreakdown> memory(world);
      int64_t psi = 0, block = 0;
      RunRanks(world, [&](int rank, Communicator* comm) {
        DsConfig config = Config(stage, 8 / world, 1, world);
        config.bf16.enabled = true;
        config.zero_optimization.stage3_prefetch_bucket_size = 0;  // one block at a time (prefetch: below)
        Gpt model(TinyGpt(), 3);
        auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
        ASSERT_TRUE(engine.ok());
        Train(**engine, model, 0, 1, 1, world, rank);
        // Stage 2 holds its gradient shard between backward and step; measure
        // inside an accumulation window as DeepSpeed's formula does.
        auto [inputs, targets] = Batch(rank, 1);
        ASSERT_TRUE((*engine)->Backward(model->Loss(inputs, targets)).ok());
        memory[rank] = (*engine)->Memory();
        if (rank == 0) {
          psi = model->ParameterCount();
          for (const auto& p : (*model->blocks)[0]->parameters()) block += p.numel();
        }
      });
      const double n = world;
      const double expected = stage == 0   ? 16.0 * psi
                              : stage == 1 ? 4.0 * psi + 12.0 * psi / n
                              : stage == 2 ? 2.0 * psi + 14.0 * psi / n
                                           : 16.0 * psi / n;
      const double units = std::max(1, memory[0].partition_units);
      // Note [Memory estimate]: `dslaunch estimate` predicts each category.
      ModelSize size;
      size.trainable = psi;
      const RankStates predicted = DslaunchRankStates(size, ZeroSetting{stage}, world, 2);
      for (int rank = 0; rank < world; ++rank) {
        const Engine::MemoryBreakdown& m = memory[rank];
        const double padding = 16.0 * world * units;
        EXPECT_NEAR(m.parameters, predicted.parameters, padding) << "stage " << stage << " N " << world;
        EXPECT_NEAR(m.gradients, predicted.gradients, padding) << "stage " << stage << " N " << world;
        EXPECT_NEAR(m.master_weights, predicted.master_weights, padding) << "stage " << stage << " N " << world;
        EXPECT_NEAR(m.optimizer_state, predicted.optimizer_state, padding) << "stage " << stage << " N " << world;
        const double total = m.parameters + m.gradients + m.master_weights + m.optimizer_state;
        if (stage >= 2) {
          EXPECT_NEAR(m.gradients, 2.0 * psi / n, 2.0 * world * units);
        }
        // reduce_bucket_size 1000 < Ψ: stages 1-2 reduce and gather bucket by bucket.
        if (stage == 1 || stage == 2) EXPECT_EQ(m.partition_units, 12) << "stage " << stage;
        if (stage == 3) {
          // Between uses only the shard: 2Ψ/N of bf16 parameters, and never
          // the whole model gathered at once during the step (the embeddings,
          // the final norm and one block at most).
          EXPECT_NEAR(m.parameters, 2.0 * psi / n, 2.0 * world * units);
          EXPECT_GT(m.gathered_peak_elements, 0);
          EXPECT_LE(m.gathered_peak_elements, psi - block + units * world) << "more than one block gathered";
        }
        EXPECT_NEAR(total, expected, 16.0 * world * units)
            << "stage " << stage << " N " << world << " Ψ " << psi;
      }
      const Engine::MemoryBreakdown& m = memory[0];
      const double measured = m.parameters + m.gradients + m.master_weights + m.optimizer_state;
      std::printf("ZeRO-%d N=%d, Ψ=%ld: measured %.0f bytes per rank (%.3fΨ), formula %.3fΨ\n", stage,
                  world, static_cast<long>(psi), measured, measured / psi, expected / psi);
    }
  }
}

TEST_F(ZeroTest, CheckpointResumesExactlyAndLoadsAtAnotherWorldSizeAndStage) {
  const std::string dir = "/tmp/zero-ckpt-" + std::to_string(::getpid());
  for (int stage : {2, 3}) {
    ASSERT_TRUE(FileSystem::Default().RemoveTree(dir).ok());
    std::vector<double> uninterrupted;
    std::vector<torch::Tensor> final_params;
    // World 2: 2 steps, save, 2 more steps.
    std::fprintf(stderr, "stage %d: train and save at world 2\n", stage);
    RunRanks(2, [&](int rank, Communicator* comm) {
      Gpt model(TinyGpt(), 5);
      auto engine = Engine::Create(model.ptr(), Config(stage, 4, 1, 2), ParallelState::DataParallelOnly(comm), torch::kCPU);
      ASSERT_TRUE(engine.ok());
      Train(**engine, model, 0, 2, 1, 2, rank);
      ASSERT_TRUE(EngineCheckpointer(**engine).Save(dir, "step2", {{"consumed_samples", 16}}).ok());
      auto later = Train(**engine, model, 2, 2, 1, 2, rank);
      auto params = TrainedParameters(**engine, model);
      if (rank == 0) {
        uninterrupted = later;
        final_params = params;
      }
    });
    // Same world and stage: bit for bit.
    std::fprintf(stderr, "stage %d: resume at world 2\n", stage);
    RunRanks(2, [&](int rank, Communicator* comm) {
      Gpt model(TinyGpt(), 99);
      auto engine = Engine::Create(model.ptr(), Config(stage, 4, 1, 2), ParallelState::DataParallelOnly(comm), torch::kCPU);
      ASSERT_TRUE(engine.ok());
      auto client = EngineCheckpointer(**engine).Load(dir);
      ASSERT_TRUE(client.ok()) << client.status();
      auto later = Train(**engine, model, 2, 2, 1, 2, rank);
      auto params = TrainedParameters(**engine, model);
      if (rank == 0) {
        EXPECT_EQ(later, uninterrupted) << "stage " << stage;
        EXPECT_EQ(MaxDifference(params, final_params), 0.0) << "stage " << stage;
      }
    });
    // World 4 and world 1, and the other stage, no offline conversion: the
    // shards are re-cut at load.
    for (auto [world, load_stage] : {std::pair{4, stage}, std::pair{1, stage}, std::pair{2, 5 - stage}}) {
      std::fprintf(stderr, "stage %d: load at world %d, stage %d\n", stage, world, load_stage);
      RunRanks(world, [&, world = world, load_stage = load_stage](int rank, Communicator* comm) {
        Gpt model(TinyGpt(), 99);
        auto engine = Engine::Create(model.ptr(), Config(load_stage, 8 / world, 1, world), ParallelState::DataParallelOnly(comm), torch::kCPU);
        ASSERT_TRUE(engine.ok());
        auto client = EngineCheckpointer(**engine).Load(dir);
        ASSERT_TRUE(client.ok()) << client.status();
        EXPECT_EQ((*engine)->global_steps(), 2);
        Train(**engine, model, 2, 2, 1, world, rank);
        auto params = TrainedParameters(**engine, model);
        if (rank == 0) {
          // Same global batches; only the order of sums differs.
          EXPECT_LT(MaxDifference(params, final_params), 1e-4)
              << "saved at stage " << stage << ", loaded at stage " << load_stage << " world " << world;
        }
      });
    }
  }
  EXPECT_TRUE(FileSystem::Default().RemoveTree(dir).ok());
}

TEST_F(ZeroTest, StageThreePrefetchGathersTheNextBlockAheadWithTheSameResults) {
  // Note [ZeRO-3 prefetch]: the next block's all-gather runs on the comm
  // worker while the current one computes. Same collectives, same order of
  // sums: the same parameters bit for bit, with at most two blocks gathered.
  GptOptions options = TinyGpt();
  options.layers = 4;
  std::vector<std::vector<torch::Tensor>> params(2);
  std::vector<int64_t> peak(2);
  int64_t psi = 0, block = 0;
  for (int prefetch : {0, 1}) {
    RunRanks(2, [&](int rank, Communicator* comm) {
      DsConfig config = Config(3, 4, 2, 2);
      config.zero_optimization.stage3_prefetch_bucket_size = prefetch ? 1000000 : 0;
      Gpt model(options, 29);
      auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
      ASSERT_TRUE(engine.ok()) << engine.status();
      Train(**engine, model, 0, 3, 2, 2, rank);
      if (rank == 0) {
        peak[prefetch] = (*engine)->Memory().gathered_peak_elements;
        psi = model->ParameterCount();
        block = 0;
        for (const auto& p : (*model->blocks)[0]->parameters()) block += p.numel();
      }
      auto trained = TrainedParameters(**engine, model);
      if (rank == 0) params[prefetch] = trained;
    });
  }
  EXPECT_EQ(MaxDifference(params[0], params[1]), 0.0);
  const int64_t roots = psi - 4 * block;
  EXPECT_LE(peak[0], roots + block + 16);       // one block at a time
  EXPECT_GT(peak[1], roots + block + 16);       // the next one arrived early
  EXPECT_LE(peak[1], roots + 2 * block + 32);   // but never more than two
}

TEST_F(ZeroTest, StageTwoOverlapCommReducesEachBlockDuringBackwardWithTheSameResults) {
  // overlap_comm: the model's units are the buckets, and each block's
  // gradients are reduce-scattered on the comm worker while backward goes
  // on. Every element is summed over the same ranks: bit-identical.
  for (int64_t accumulation : {1, 2}) {
    std::vector<std::vector<torch::Tensor>> params(2);
    std::vector<int> units(2);
    for (int overlap : {0, 1}) {
      RunRanks(2, [&](int rank, Communicator* comm) {
        DsConfig config = Config(2, 4 / accumulation, accumulation, 2);
        config.zero_optimization.overlap_comm = overlap == 1;
        Gpt model(TinyGpt(), 31);
        auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
        ASSERT_TRUE(engine.ok()) << engine.status();
        Train(**engine, model, 0, 3, accumulation, 2, rank);
        if (rank == 0) {
          params[overlap] = Parameters(model);
          units[overlap] = (*engine)->Memory().partition_units;
        }
      });
    }
    EXPECT_EQ(MaxDifference(params[0], params[1]), 0.0) << "accumulation " << accumulation;
    EXPECT_EQ(units[1], 4);  // embeddings, two blocks, final norm
    EXPECT_EQ(units[0], 12);  // reduce_bucket_size buckets
  }
  // One rank has nothing to overlap: overlap_comm leaves it the plain buckets
  // (and, on a GPU, the in-place step).
  DsConfig config = Config(2, 8, 1, 1);
  config.zero_optimization.overlap_comm = true;
  Gpt model(TinyGpt(), 31);
  auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->Memory().partition_units, 12);
}

TEST_F(ZeroTest, EveryStageWithAndWithoutOffloadAndRecomputationMatchesStageZero) {
  // The acceptance grid: stages 1-3 x CPU offload (optimizer, and parameters
  // at stage 3) x activation checkpointing x 1, 2 and 4 ranks, against stage
  // 0 on one rank. fp32: only the order of sums differs (1e-4, as above);
  // the SIMD Adam of the offloaded runs adds ~1e-6 per step.
  GptOptions recomputed = TinyGpt();
  recomputed.checkpointed_blocks = 2;
  Gpt reference_model(TinyGpt(), 41);
  auto reference = Engine::Create(reference_model.ptr(), Config(0, 8, 1, 1), ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(reference.ok());
  auto reference_losses = Train(**reference, reference_model, 0, 3, 1, 1, 0);
  auto reference_params = Parameters(reference_model);
  for (int stage : {1, 2, 3}) {
    for (bool offload : {false, true}) {
      for (bool recompute : {false, true}) {
        for (int world : {1, 2, 4}) {
          std::vector<std::vector<double>> losses(world);
          std::vector<std::vector<torch::Tensor>> params(world);
          RunRanks(world, [&](int rank, Communicator* comm) {
            DsConfig config = Config(stage, 8 / world, 1, world);
            if (offload) config.zero_optimization.offload_optimizer.device = "cpu";
            if (offload && stage == 3) config.zero_optimization.offload_param.device = "cpu";
            Gpt model(recompute ? recomputed : TinyGpt(), 41);
            auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
            ASSERT_TRUE(engine.ok()) << engine.status();
            losses[rank] = Train(**engine, model, 0, 3, 1, world, rank);
            params[rank] = TrainedParameters(**engine, model);
          });
          const std::string what = absl::StrCat("stage ", stage, offload ? " offload" : "",
                                                recompute ? " recompute" : "", " world ", world);
          for (int step = 0; step < 3; ++step) {
            double mean = 0;
            for (int rank = 0; rank < world; ++rank) mean += losses[rank][step] / world;
            EXPECT_NEAR(mean, reference_losses[step], 1e-5) << what << " step " << step;
          }
          EXPECT_LT(MaxDifference(params[0], reference_params), 1e-4) << what;
        }
      }
    }
  }
}

TEST_F(ZeroTest, StageThreeWithActivationCheckpointingAndBf16MatchesStageZero) {
  // Recomputed blocks run inside their gathered unit in backward; bf16 keeps
  // the arithmetic of stage 0 with mixed precision (same casts, same order
  // of sums on one rank), so one rank matches exactly and two closely.
  GptOptions options = TinyGpt();
  options.checkpointed_blocks = 2;
  for (int world : {1, 2}) {
    std::vector<std::vector<torch::Tensor>> params(2, std::vector<torch::Tensor>{});
    std::vector<std::vector<double>> losses(2);
    for (int stage : {0, 3}) {
      RunRanks(world, [&](int rank, Communicator* comm) {
        DsConfig config = Config(stage, 8 / world, 1, world);
        config.bf16.enabled = true;
        Gpt model(options, 17);
        auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
        ASSERT_TRUE(engine.ok()) << engine.status();
        auto trained = Train(**engine, model, 0, 3, 1, world, rank);
        auto trained_params = TrainedParameters(**engine, model);
        if (rank == 0) {
          losses[stage / 3] = trained;
          params[stage / 3] = trained_params;
        }
      });
    }
    if (world == 1) {
      EXPECT_EQ(losses[0], losses[1]);
      EXPECT_EQ(MaxDifference(params[0], params[1]), 0.0);
    } else {
      for (size_t step = 0; step < losses[0].size(); ++step) EXPECT_NEAR(losses[0][step], losses[1][step], 2e-2);
      EXPECT_LT(MaxDifference(params[0], params[1]), 2e-2);
    }
  }
}

TEST_F(ZeroTest, RefusedCombinationsSayWhy) {
  Gpt model(TinyGpt(), 1);
  DsConfig config = Config(0, 8, 1, 1);
  config.zero_optimization.offload_optimizer.device = "cpu";
  auto stage0 = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_FALSE(stage0.ok());
  EXPECT_NE(std::string(stage0.status().message()).find("needs zero_optimization.stage 1, 2 or 3"), std::string::npos);
  config.zero_optimization.stage = 2;
  config.zero_optimization.offload_optimizer.device = "nvme";
  auto nvme = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_FALSE(nvme.ok());
  EXPECT_NE(std::string(nvme.status().message()).find("offload_optimizer.nvme_path is not set"),
            std::string::npos);
  config.zero_optimization.offload_optimizer.device = "none";
  config.zero_optimization.offload_param.device = "cpu";
  auto param_offload = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_FALSE(param_offload.ok());
  EXPECT_NE(std::string(param_offload.status().message()).find("offload_param.device=cpu needs zero_optimization.stage 3"),
            std::string::npos);
  config.zero_optimization.offload_param.device = "none";
  config.zero_optimization.offload_optimizer.delay_update = true;
  auto delayed = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_FALSE(delayed.ok());
  EXPECT_NE(std::string(delayed.status().message()).find("delay_update needs offload_optimizer.device=cpu (it is none)"),
            std::string::npos)
      << delayed.status();
  config.zero_optimization.offload_optimizer.delay_update = false;
  // Stage 3 needs the model's units; a module that does not name them is refused.
  config.zero_optimization.offload_param.device = "none";
  config.zero_optimization.stage = 3;
  torch::nn::Linear plain(4, 4);
  auto stage3 = Engine::Create(plain.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_FALSE(stage3.ok());
  EXPECT_NE(std::string(stage3.status().message()).find("needs a model that names its parameter units"),
            std::string::npos);
  // One block of the tiny GPT has 3280 elements: a bound below a step's need is refused.
  config.zero_optimization.stage3_max_live_parameters = 1000;
  auto too_few = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_FALSE(too_few.ok());
  EXPECT_NE(std::string(too_few.status().message()).find("stage3_max_live_parameters=1000 is below"), std::string::npos)
      << too_few.status();
}

// Reads a safetensors file: (header JSON, data as floats).
std::pair<std::string, std::vector<float>> ReadSafetensors(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  EXPECT_NE(file, nullptr) << path;
  if (file == nullptr) return {};
  unsigned char prefix[8];
  EXPECT_EQ(std::fread(prefix, 1, 8, file), 8u);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | prefix[i];
  std::string header(length, ' ');
  EXPECT_EQ(std::fread(header.data(), 1, length, file), length);
  std::vector<float> data;
  float value;
  while (std::fread(&value, sizeof(float), 1, file) == 1) data.push_back(value);
  std::fclose(file);
  return {header, data};
}

TEST_F(ZeroTest, ConsolidationEqualsTheTrainedParameters) {
  const std::string dir = "/tmp/zero-consolidate-" + std::to_string(::getpid());
  for (int stage : {0, 2, 3}) {
    ASSERT_TRUE(FileSystem::Default().RemoveTree(dir).ok());
    std::vector<torch::Tensor> params;
    std::vector<std::string> names;
    RunRanks(2, [&](int rank, Communicator* comm) {
      Gpt model(TinyGpt(), 8);
      DsConfig config = Config(stage, 4, 1, 2);
      config.zero_optimization.stage3_gather_16bit_weights_on_model_save = true;  // stage 3 only
      auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
      ASSERT_TRUE(engine.ok());
      Train(**engine, model, 0, 2, 1, 2, rank);
      ASSERT_TRUE(EngineCheckpointer(**engine).Save(dir, "final", {}).ok());
      auto trained = TrainedParameters(**engine, model);
      if (rank == 0) {
        params = trained;
        for (const auto& item : model->named_parameters()) names.push_back(item.key());
      }
    });
    const std::string output = dir + "/model.safetensors";
    auto summary = ConsolidateCheckpoint(dir, "", output);
    ASSERT_TRUE(summary.ok()) << summary.status();
    EXPECT_EQ(summary->ranks_read, stage == 0 ? 1 : 2);
    auto [header, data] = ReadSafetensors(output);
    torch::Tensor expected = torch::cat([&] {
      std::vector<torch::Tensor> flat;
      for (auto& p : params) flat.push_back(p.reshape({-1}));
      return flat;
    }());
    ASSERT_EQ(static_cast<int64_t>(data.size()), expected.numel()) << "stage " << stage;
    torch::Tensor written = torch::from_blob(data.data(), {static_cast<int64_t>(data.size())}, torch::kFloat);
    // fp32 training: the masters are the parameters, exactly.
    EXPECT_TRUE(torch::equal(written, expected)) << "stage " << stage;
    for (const auto& name : names) EXPECT_NE(header.find("\"" + name + "\""), std::string::npos) << name;
    EXPECT_NE(header.find("\"dtype\":\"F32\""), std::string::npos);
    // ZeRO-3 with stage3_gather_16bit_weights_on_model_save: the whole model
    // beside the shards, equal to the consolidated masters (fp32 training).
    const std::string gathered = dir + "/final/" + Engine::kGatheredWeightsFile;
    EXPECT_EQ(FileSystem::Default().Exists(gathered), stage == 3) << gathered;
    if (stage == 3) {
      auto [gathered_header, gathered_data] = ReadSafetensors(gathered);
      EXPECT_EQ(gathered_header, header);
      EXPECT_EQ(gathered_data, data);
    }
  }
  EXPECT_TRUE(FileSystem::Default().RemoveTree(dir).ok());
}

}  // namespace
}  // namespace dslaunch::runtime

namespace dslaunch::runtime {
namespace {

// Note [In-place fused step]: on one GPU, stage 0 steps each parameter where
// autograd left its gradient; stage 2 with two micro-steps per step goes
// through the flat shard's accumulator (Note [Fused shard step]). Same arithmetic on the same values up to the
// gradient norm's summation order: the same losses and weights.
TEST(ZeroGpuTest, InPlaceFusedStepMatchesTheFlatShardStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  std::vector<std::vector<double>> losses;
  std::vector<std::vector<torch::Tensor>> params;
  for (int stage : {0, 2}) {
    DsConfig config = Config(stage, 4, 2, 1);
    config.bf16.enabled = true;
    GptOptions options = TinyGpt();
    options.fused_kernels = true;
    Gpt model(options, 13);
    auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::Device(torch::kCUDA, 0));
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<double> stage_losses;
    for (int step = 0; step < 4; ++step) {
      for (int micro = 0; micro < 2; ++micro) {
        auto [inputs, targets] = Batch(step * 8 + micro * 4, 4);
        torch::Tensor loss = model->Loss(inputs.cuda(), targets.cuda());
        stage_losses.push_back(loss.item<double>());
        ASSERT_TRUE((*engine)->Backward(loss).ok());
        auto stepped = (*engine)->Step();
        ASSERT_TRUE(stepped.ok()) << stepped.status();
        EXPECT_EQ(stepped->stepped, micro == 1);
      }
    }
    losses.push_back(stage_losses);
    params.push_back(Parameters(model));
  }
  for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_NEAR(losses[0][i], losses[1][i], 1e-3) << "step " << i;
  // bf16 weights: the two paths may round a master that differs in its last
  // fp32 bits (the norms are summed in another order) to neighbouring bf16
  // values, one ulp (≤ 2^-8 relative) apart.
  EXPECT_LT(MaxDifference(params[0], params[1]), 1e-2);
}

// Note [Fused shard step]: stage 2 with accumulated gradients (and stage 3)
// step on the GPU with the fused kernel over the reduced gradient sum, the
// 16-bit values written into the gather buffers; the CPU runs the same stages
// with LibTorch ops over an fp32 mean. In fp32 (LibTorch leaves TF32 off)
// the two agree up to summation order, with Config()'s clipping.
TEST(ZeroGpuTest, FusedShardStepMatchesTheCpuStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (int stage : {2, 3}) {
    std::vector<std::vector<double>> losses;
    std::vector<std::vector<torch::Tensor>> params;
    for (bool cuda : {false, true}) {
      const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
      DsConfig config = Config(stage, 4, 2, 1);
      GptOptions options = TinyGpt();
      options.fused_kernels = false;  // the same model arithmetic on both devices
      Gpt model(options, 13);
      auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(nullptr), device);
      ASSERT_TRUE(engine.ok()) << engine.status();
      std::vector<double> run_losses;
      for (int step = 0; step < 4; ++step) {
        for (int micro = 0; micro < 2; ++micro) {
          auto [inputs, targets] = Batch(step * 8 + micro * 4, 4);
          torch::Tensor loss = model->Loss(inputs.to(device), targets.to(device));
          run_losses.push_back(loss.item<double>());
          ASSERT_TRUE((*engine)->Backward(loss).ok());
          auto stepped = (*engine)->Step();
          ASSERT_TRUE(stepped.ok()) << stepped.status();
          EXPECT_EQ(stepped->stepped, micro == 1);
        }
      }
      ASSERT_TRUE((*engine)->GatherFullParameters().ok());
      losses.push_back(run_losses);
      std::vector<torch::Tensor> values;
      for (const torch::Tensor& p : Parameters(model)) values.push_back(p.cpu());
      params.push_back(values);
    }
    for (size_t i = 0; i < losses[0].size(); ++i) {
      EXPECT_NEAR(losses[0][i], losses[1][i], 1e-4 * losses[0][i]) << "stage " << stage << " micro-step " << i;
    }
    EXPECT_LT(MaxDifference(params[0], params[1]), 1e-4) << "stage " << stage;
  }
}

}  // namespace
}  // namespace dslaunch::runtime

namespace dslaunch::runtime {
namespace {

// An fp32 stage-0 checkpoint keeps per-parameter optimizer state; a ZeRO or
// mixed-precision engine keeps one flat vector. Loading one into the other
// is refused with the reason, not a crash in the archive reader.
TEST(ZeroCheckpointTest, ALayoutMismatchIsRefusedWithTheReason) {
  char pattern[] = "/tmp/zero-layout-XXXXXX";
  const std::string dir = mkdtemp(pattern);
  {
    Gpt model(TinyGpt(), 5);
    auto engine = Engine::Create(model.ptr(), Config(0, 8, 1, 1), ParallelState::DataParallelOnly(nullptr), torch::kCPU);
    ASSERT_TRUE(engine.ok()) << engine.status();
    ASSERT_TRUE(EngineCheckpointer(**engine).Save(dir, "fp32", {}).ok());
  }
  for (int stage : {1, 2}) {
    Gpt model(TinyGpt(), 5);
    auto engine = Engine::Create(model.ptr(), Config(stage, 8, 1, 1), ParallelState::DataParallelOnly(nullptr), torch::kCPU);
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto loaded = EngineCheckpointer(**engine).Load(dir, "fp32");
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(std::string(loaded.status().message()).find("per-parameter fp32 optimizer state"), std::string::npos)
        << loaded.status();
  }
  ASSERT_TRUE(FileSystem::Default().RemoveTree(dir).ok());
}

}  // namespace
}  // namespace dslaunch::runtime
