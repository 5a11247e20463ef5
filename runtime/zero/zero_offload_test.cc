// ZeRO with the optimizer offloaded: CPU offload against the device step,
// the gradients' way down during backward, the bf16 copy the host step
// writes, NVMe offload against CPU offload, and the delayed update.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/rank_contract.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/engine_checkpointer.h"
#include "runtime/engine/engine.h"
#include "runtime/fs/file_system.h"
#include "runtime/model/gpt.h"
#include "runtime/testing/disk_test_folder.h"
#include "runtime/testing/rank_group.h"
#include "runtime/zero/shard_adam.h"
#include "runtime/zero/zero_partition.h"
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

TEST_F(ZeroTest, CpuOffloadWithTheSimdAdamMatchesTheDeviceStep) {
  // Stage 3 also offloads its parameter shard (offload_param).
  for (int stage : {1, 2, 3}) {
    std::vector<std::vector<torch::Tensor>> params(2), offloaded(2);
    for (bool offload : {false, true}) {
      RunRanks(2, [&](int rank, Communicator* comm) {
        DsConfig config = Config(stage, 4, 1, 2);
        if (offload) config.zero_optimization.offload_optimizer.device = "cpu";
        if (offload && stage == 3) config.zero_optimization.offload_param.device = "cpu";
        Gpt model(TinyGpt(), 13);
        auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
        ASSERT_TRUE(engine.ok()) << engine.status();
        Train(**engine, model, 0, 3, 1, 2, rank);
        EXPECT_EQ((*engine)->Memory().optimizer_on_host, offload);
        EXPECT_EQ((*engine)->Memory().parameters_on_host, offload && stage == 3);
        (offload ? offloaded : params)[rank] = TrainedParameters(**engine, model);
      });
    }
    // The SIMD step fuses the moment updates' multiply-adds (kernels/cpu_adam.h
    // bounds it at ~1e-6 of the inputs per operation); over three steps of lr
    // 1e-2 that stays far below 1e-5 of the weights.
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_LT(MaxDifference(params[rank], offloaded[rank]), 1e-5) << "stage " << stage;
    }
  }
}

// Note [NVMe offload]: swap files on a real file system, beside the test.
class NvmeFolder : public testing::DiskTestFolder {
 public:
  NvmeFolder() : DiskTestFolder("nvme-test") {}
};

void UseNvme(DsConfig& config, const std::string& path) {
  config.zero_optimization.offload_optimizer.device = "nvme";
  config.zero_optimization.offload_optimizer.nvme_path = path;
  config.zero_optimization.sub_group_size = 1000;  // several sub-groups of the tiny model's shard
  config.aio.block_size = 8192;
  config.aio.queue_depth = 4;
}

TEST_F(ZeroTest, NvmeOffloadMatchesCpuOffloadBitForBit) {
  // The same SIMD Adam over the same values, a sub-group at a time from the
  // swap files instead of over the whole shard in memory: equal bit for bit,
  // at stages 2 and 3, on 1 and 2 ranks, through io_uring and pread/pwrite.
  NvmeFolder folder;
  std::map<std::pair<int, int>, std::pair<std::vector<double>, std::vector<torch::Tensor>>> cpu;
  for (int stage : {2, 3}) {
    for (int world : {1, 2}) {
      for (const char* io : {"cpu", "io_uring", "pread"}) {
        if (std::string(io) == "pread") {
          if (stage != 2 || world != 2) continue;
          ::setenv(rank_env::kNoIoUring, "1", 1);
        }
        std::vector<std::vector<double>> losses(world);
        std::vector<std::vector<torch::Tensor>> params(world);
        RunRanks(world, [&](int rank, Communicator* comm) {
          DsConfig config = Config(stage, 8 / world, 1, world);
          if (std::string(io) == "cpu") {
            config.zero_optimization.offload_optimizer.device = "cpu";
          } else {
            UseNvme(config, folder.path());
          }
          Gpt model(TinyGpt(), 17);
          auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
          ASSERT_TRUE(engine.ok()) << engine.status();
          if (std::string(io) != "cpu") {
            const std::string described = (*engine)->NvmeOffloadDescription();
            EXPECT_NE(described.find(std::string(io) == "pread" ? "pread/pwrite" : "io_uring"), std::string::npos)
                << described;
            const Engine::MemoryBreakdown memory = (*engine)->Memory();
            EXPECT_EQ(memory.master_weights, 0);
            EXPECT_EQ(memory.optimizer_state, 0);
            // Master and both moments of every shard element (fp32 gradients: 4 bytes each).
            EXPECT_GE(memory.swapped_to_nvme, 12 * (memory.gradients / 4));
          }
          losses[rank] = Train(**engine, model, 0, 3, 1, world, rank);
          params[rank] = TrainedParameters(**engine, model);
        });
        ::unsetenv(rank_env::kNoIoUring);
        const std::string what = absl::StrCat("stage ", stage, " world ", world, " ", io);
        if (std::string(io) == "cpu") {
          cpu[std::make_pair(stage, world)] = {losses[0], params[0]};
          continue;
        }
        const auto& reference = cpu[std::make_pair(stage, world)];
        EXPECT_EQ(losses[0], reference.first) << what;
        EXPECT_EQ(MaxDifference(params[0], reference.second), 0.0) << what;
      }
    }
  }
  // Every rank's folder went with its engine.
  auto left = FileSystem::Default().ListDirectory(folder.path() + "/dslaunch-swap");
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->empty());
}

TEST_F(ZeroTest, NvmeOffloadCheckpointsResumeBitForBitAndLoadWithoutIt) {
  // Into NVMe offload again, and into CPU offload: the same checkpoint, the
  // same continuation, bit for bit.
  NvmeFolder folder;
  DsConfig nvme = Config(2, 4, 1, 2);
  UseNvme(nvme, folder.path());
  DsConfig cpu = Config(2, 4, 1, 2);
  cpu.zero_optimization.offload_optimizer.device = "cpu";
  ExpectResumeBitForBit("/tmp/zero-nvme-ckpt-" + std::to_string(::getpid()), nvme, {{"nvme", nvme}, {"cpu", cpu}},
                        /*steps=*/2, /*seed=*/5);
}

TEST_F(ZeroTest, ACorruptSwapFileStopsTheStepNamingIt) {
  NvmeFolder folder;
  Gpt model(TinyGpt(), 3);
  DsConfig config = Config(2, 8, 1, 1);
  UseNvme(config, folder.path());
  auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(engine.ok()) << engine.status();
  Train(**engine, model, 0, 1, 1, 1, 0);
  const std::string file = folder.path() + "/dslaunch-swap/job-rank0/exp_avg_sq.0.swp";
  testing::FlipBitsInFile(file, 4096 + 8, 0x10);  // one flipped bit in the payload
  auto [inputs, targets] = Batch(8, 8);
  ASSERT_TRUE((*engine)->Backward(model->Loss(inputs, targets)).ok());
  auto stepped = (*engine)->Step();
  ASSERT_FALSE(stepped.ok());
  EXPECT_NE(std::string(stepped.status().message()).find("swap file " + file + ": checksum mismatch"),
            std::string::npos)
      << stepped.status();
}

// Note [Sub-groups on NVMe]: DeepSpeed's default sub_group_size would hold
// 36 bytes of host buffers per element; the swap cuts it and says so.
TEST_F(ZeroTest, NvmeSubGroupsAreCutToBoundTheHostBuffers) {
  NvmeFolder folder;
  Gpt model(TinyGpt(), 3);
  DsConfig config = Config(2, 8, 1, 1);
  UseNvme(config, folder.path());
  config.zero_optimization.sub_group_size = 1'000'000'000;
  auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_NE((*engine)->NvmeOffloadDescription().find("sub_group_size=1000000000 cut to 100000000 elements"),
            std::string::npos)
      << (*engine)->NvmeOffloadDescription();
}

// Note [Delayed parameter update]'s arithmetic without the engine's thread:
// step k's gradient is taken on a second copy of the model that holds the
// parameters after max(min(k, W), k - 1) updates (W plain warm-up steps,
// then one update late), and handed to a stage-0 engine on the first copy
// through the surrogate loss Σ p·g (whose gradient is g). Returns the
// per-step losses and the parameters after all updates.
std::pair<std::vector<double>, std::vector<torch::Tensor>> DelayedUpdateReference(int steps, int seed,
                                                                                  int warmup = 0) {
  Gpt ahead(TinyGpt(), seed), behind(TinyGpt(), seed);
  auto engine = Engine::Create(ahead.ptr(), Config(0, 8, 1, 1), ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  EXPECT_TRUE(engine.ok()) << engine.status();
  std::vector<std::vector<torch::Tensor>> after_updates = {Parameters(ahead)};
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    std::vector<torch::Tensor> behind_params = behind->parameters();
    {
      torch::NoGradGuard no_grad;
      const auto& source = after_updates[std::max(std::min(step, warmup), step - 1)];
      for (size_t i = 0; i < behind_params.size(); ++i) behind_params[i].copy_(source[i]);
    }
    auto [inputs, targets] = Batch(step * 8, 8);
    torch::Tensor loss = behind->Loss(inputs, targets);
    losses.push_back(loss.item<double>());
    std::vector<torch::Tensor> grads = torch::autograd::grad({loss}, behind_params, {}, false, false, true);
    std::vector<torch::Tensor> ahead_params = ahead->parameters();
    torch::Tensor surrogate = torch::zeros({}, torch::kDouble);
    for (size_t i = 0; i < ahead_params.size(); ++i) {
      if (grads[i].defined()) surrogate = surrogate + (ahead_params[i] * grads[i]).sum();
    }
    EXPECT_TRUE((*engine)->Backward(surrogate).ok());
    EXPECT_TRUE((*engine)->Step().ok());
    after_updates.push_back(Parameters(ahead));
  }
  return {losses, Parameters(ahead)};
}

TEST_F(ZeroTest, DelayedUpdateTakesEachGradientOneUpdateLateAtEveryStage) {
  constexpr int kSteps = 4;
  auto [reference_losses, reference_params] = DelayedUpdateReference(kSteps, 17);
  // The delayed run is not the plain one: from the second step on, the two
  // differ by far more than the tolerance below.
  Gpt plain_model(TinyGpt(), 17);
  auto plain = Engine::Create(plain_model.ptr(), Config(0, 8, 1, 1), ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(plain.ok());
  auto plain_losses = Train(**plain, plain_model, 0, kSteps, 1, 1, 0);
  EXPECT_EQ(plain_losses[0], reference_losses[0]);
  EXPECT_GT(std::abs(plain_losses[2] - reference_losses[2]), 1e-3);
  for (int stage : {1, 2, 3}) {
    for (int world : {1, 2, 4}) {
      for (int64_t accumulation : {1, 2}) {
        if (8 % (world * accumulation) != 0) continue;
        std::vector<std::vector<double>> losses(world);
        std::vector<std::vector<torch::Tensor>> params(world);
        RunRanks(world, [&](int rank, Communicator* comm) {
          DsConfig config = Config(stage, 8 / (world * accumulation), accumulation, world);
          config.zero_optimization.offload_optimizer.device = "cpu";
          config.zero_optimization.offload_optimizer.delay_update = true;
          if (stage == 3) config.zero_optimization.offload_param.device = "cpu";
          Gpt model(TinyGpt(), 17);
          auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
          ASSERT_TRUE(engine.ok()) << engine.status();
          losses[rank] = Train(**engine, model, 0, kSteps, accumulation, world, rank);
          // Applies the last step's pending update first.
          params[rank] = TrainedParameters(**engine, model);
        });
        const std::string what = absl::StrCat("stage ", stage, " world ", world, " gas ", accumulation);
        for (int step = 0; step < kSteps; ++step) {
          double mean = 0;
          for (int rank = 0; rank < world; ++rank) mean += losses[rank][step] / world;
          EXPECT_NEAR(mean, reference_losses[step], 1e-5) << what << " step " << step;
        }
        for (int rank = 0; rank < world; ++rank) {
          EXPECT_LT(MaxDifference(params[rank], reference_params), 1e-4) << what << " rank " << rank;
        }
      }
    }
  }
}

TEST_F(ZeroTest, DelayedUpdateWaitsForItsWarmUpSteps) {
  // delay_update_warmup_steps = 2: steps 0-2 are plain (step 2's gradient
  // is still on current parameters), from step 3 on one update late.
  constexpr int kSteps = 5, kWarmup = 2;
  auto [reference_losses, reference_params] = DelayedUpdateReference(kSteps, 19, kWarmup);
  auto [no_warmup_losses, no_warmup_params] = DelayedUpdateReference(kSteps, 19, 0);
  EXPECT_GT(std::abs(no_warmup_losses[2] - reference_losses[2]), 1e-3);
  for (int world : {1, 2}) {
    std::vector<std::vector<double>> losses(world);
    std::vector<std::vector<torch::Tensor>> params(world);
    RunRanks(world, [&](int rank, Communicator* comm) {
      DsConfig config = Config(2, 8 / world, 1, world);
      config.zero_optimization.offload_optimizer.device = "cpu";
      config.zero_optimization.offload_optimizer.delay_update = true;
      config.zero_optimization.offload_optimizer.delay_update_warmup_steps = kWarmup;
      Gpt model(TinyGpt(), 19);
      auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
      ASSERT_TRUE(engine.ok()) << engine.status();
      losses[rank] = Train(**engine, model, 0, kSteps, 1, world, rank);
      params[rank] = TrainedParameters(**engine, model);
    });
    for (int step = 0; step < kSteps; ++step) {
      double mean = 0;
      for (int rank = 0; rank < world; ++rank) mean += losses[rank][step] / world;
      EXPECT_NEAR(mean, reference_losses[step], 1e-5) << "world " << world << " step " << step;
    }
    EXPECT_LT(MaxDifference(params[0], reference_params), 1e-4) << "world " << world;
  }
}

TEST_F(ZeroTest, DelayedUpdateCheckpointsResumeBitForBit) {
  // A save applies the pending update; the run goes on from it exactly as a
  // run resumed from the checkpoint does.
  DsConfig config = Config(2, 4, 1, 2);
  config.zero_optimization.offload_optimizer.device = "cpu";
  config.zero_optimization.offload_optimizer.delay_update = true;
  ExpectResumeBitForBit("/tmp/zero-delay-ckpt-" + std::to_string(::getpid()), config, {{"delayed", config}},
                        /*steps=*/3, /*seed=*/7);
}


// Three units (two layers and a root unit) of small tensors, in fp32.
std::vector<torch::Tensor> ThreeUnitParameters(torch::Dtype dtype = torch::kFloat) {
  std::vector<torch::Tensor> params;
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{5, 3}, {7}, {11}, {4, 4}, {3}}) {
    params.push_back(torch::linspace(-1, 1, c10::multiply_integers(shape)).reshape(shape).to(dtype).requires_grad_());
  }
  return params;
}

std::vector<ParameterUnit> ThreeUnits() {
  return {ParameterUnit{0, 2, /*layer=*/true}, ParameterUnit{2, 1, /*layer=*/true},
          ParameterUnit{3, 2, /*layer=*/false}};
}

// Gradients for `unit`'s parameters of `units`, drawn from `seed` (and the rank).
void SetUnitGradients(std::vector<torch::Tensor>& params, const ParameterUnit& unit, int seed, int rank) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed * 100 + rank);
  for (int64_t i = unit.first_parameter; i < unit.first_parameter + unit.parameter_count; ++i) {
    params[i].mutable_grad() = torch::randn(params[i].sizes(), generator).to(params[i].scalar_type());
  }
}

TEST_F(ZeroTest, GradientsStreamedToTheHostDuringBackwardEqualTheOnesPreparedAfterIt) {
  // Note [Gradients to the host during backward]: two micro-steps; in the
  // last one unit 1 gets no gradient (its mean comes from the first
  // micro-step's sum, after backward), unit 2 gets two (streamed twice, the
  // second time whole) and unit 0 one. The streamed mean must equal the one
  // prepared after backward bit for bit, the norm up to its summation order.
  for (int world : {1, 2}) {
    std::vector<torch::Tensor> means(2), norms(2);
    std::vector<int> streamed(2);
    for (bool stream : {false, true}) {
      RunRanks(world, [&](int rank, Communicator* comm) {
        ZeroOptions options;
        options.stage = 2;
        options.offload_optimizer = true;
        options.overlap_units = true;
        options.units = ThreeUnits();
        std::vector<torch::Tensor> params = ThreeUnitParameters();
        auto zero = ZeroPartition::Create(options, params, world > 1 ? comm : nullptr);
        ASSERT_TRUE(zero.ok()) << zero.status();
        ZeroPartition& z = **zero;
        EXPECT_TRUE(z.StreamsGradientsToHost());
        z.BeginBackward(/*last_micro_step=*/false);
        for (int u : {2, 1, 0}) {
          SetUnitGradients(params, options.units[u], 1 + u, rank);
          ASSERT_TRUE(z.AccumulateUnitGradients(u).ok());
        }
        ASSERT_TRUE(z.AccumulateMicroStep().ok());
        z.BeginBackward(/*last_micro_step=*/stream);
        for (int u : {2, 2, 0}) {
          SetUnitGradients(params, options.units[u], 10 + u + static_cast<int>(z.UnitHasGradients(u)), rank);
          ASSERT_TRUE(z.AccumulateUnitGradients(u).ok());
        }
        ASSERT_TRUE(z.PrepareShardGradient().ok());
        if (rank == 0) {
          means[stream] = z.shard_gradient().clone();
          norms[stream] = z.LocalGradNormSquared().clone();
          streamed[stream] = z.streamed_units();
        }
      });
    }
    EXPECT_EQ(streamed[0], 0) << "world " << world;
    EXPECT_EQ(streamed[1], 2) << "world " << world;
    EXPECT_TRUE(torch::equal(means[0], means[1])) << "world " << world << ": " << (means[0] - means[1]).abs().max();
    EXPECT_NEAR(norms[0].item<double>(), norms[1].item<double>(), 1e-12 * norms[0].item<double>())
        << "world " << world;
  }
}

TEST_F(ZeroTest, TheHostStepsBf16CopyIsWhatGoesUp) {
  // Note [bf16 parameters from the host step]: the gather after a ranged
  // step sends the copy the step wrote; the parameters are then the new
  // master rounded, bit for bit. A step that does not write the copy leaves
  // the old values in it, and this check fails.
  // Stage 3 also with its parameter shard on the host (the copy is that
  // shard), and so under the delayed update (a second shard that trades
  // places with the first at each gather).
  struct Case {
    int stage;
    bool offload_param, beside_forward;
  };
  for (const Case& c : {Case{1, false, false}, Case{2, false, false}, Case{3, false, false}, Case{3, true, false},
                        Case{3, true, true}}) {
    const int stage = c.stage;
    ZeroOptions options;
    options.stage = stage;
    options.offload_optimizer = true;
    options.offload_param = c.offload_param;
    options.host_step_beside_forward = c.beside_forward;
    if (stage == 3) options.units = ThreeUnits();
    std::vector<torch::Tensor> params = ThreeUnitParameters(torch::kBFloat16);
    auto zero = ZeroPartition::Create(options, params, nullptr);
    ASSERT_TRUE(zero.ok()) << zero.status();
    ZeroPartition& z = **zero;
    ASSERT_TRUE(z.host_parameter_copy().defined()) << "stage " << stage;
    // Counted when it is a buffer of its own (2 bytes per shard element),
    // not when it is the parameter shard itself.
    const bool own_buffer = !(stage == 3 && c.offload_param && !c.beside_forward);
    EXPECT_EQ(z.HostParameterCopyBytes(), own_buffer ? 2 * z.shard_size() : 0) << "stage " << stage;
    OptimizerConfig adam;
    adam.type = "AdamW";
    ShardAdam shard_adam(adam, z.master_shard(), /*host_kernel=*/true);
    for (int step = 1; step <= 2; ++step) {
      if (stage == 3) ASSERT_TRUE(z.GatherUnit(0).ok() && z.GatherUnit(1).ok() && z.GatherUnit(2).ok());
      for (const ParameterUnit& unit : ThreeUnits()) SetUnitGradients(params, unit, step, 0);
      if (stage == 3) {
        for (int u = 0; u < z.units(); ++u) ASSERT_TRUE(z.AccumulateUnitGradients(u).ok());
      }
      ASSERT_TRUE(z.PrepareShardGradient().ok());
      shard_adam.CountStep(1e-1, 0.9, 0.999);
      torch::Tensor grad = z.shard_gradient();
      const void* copy_before = z.host_parameter_copy().data_ptr();
      ASSERT_TRUE(z.GatherParameters([&](int64_t offset, int64_t length) {
                     shard_adam.StepRange(z.master_shard(), grad, offset, length, 1e-1, 0.9, 0.999, 1.0,
                                          z.host_parameter_copy());
                   }).ok());
      // Stage 3 with the copy a second shard beside the parameter shard (here
      // on the CPU both live on the host; on a GPU only with offload_param):
      // the two trade places, nothing is copied.
      const bool trades = stage == 3 && !(c.offload_param && !c.beside_forward);
      EXPECT_EQ(z.host_parameter_copy().data_ptr() != copy_before, trades) << "stage " << stage << " step " << step;
      z.ZeroGradients();
      if (stage == 3) ASSERT_TRUE(z.GatherUnit(0).ok() && z.GatherUnit(1).ok() && z.GatherUnit(2).ok());
      std::vector<torch::Tensor> flat;
      for (const torch::Tensor& p : params) flat.push_back(p.detach().reshape({-1}));
      torch::Tensor uploaded = torch::cat(flat);
      // One rank: the shard is every parameter in order, unpadded.
      torch::Tensor expected = z.master_shard().detach().to(torch::kBFloat16);
      EXPECT_TRUE(torch::equal(uploaded, expected))
          << "stage " << stage << (c.offload_param ? " offload_param" : "")
          << (c.beside_forward ? " beside forward" : "") << " step " << step;
    }
  }
}

TEST_F(ZeroTest, Bf16CpuOffloadMatchesBf16OnTheDevice) {
  // The whole engine in bf16: stage 2 (units streamed down during backward,
  // one and two micro-steps) and stage 3 with its parameter shard on the
  // host (written in place by the CPU Adam), the bf16 copy going up, against
  // the same stages without offload. The SIMD Adam's ~1e-6 can move a
  // weight by one bf16 step (4e-3 near 1) and the losses by a little more.
  for (int stage : {2, 3}) {
    for (int world : {1, 2}) {
      for (int64_t accumulation : {1, 2}) {
        std::vector<std::vector<double>> losses(2);
        std::vector<std::vector<torch::Tensor>> params(2);
        for (bool offload : {false, true}) {
          RunRanks(world, [&](int rank, Communicator* comm) {
            DsConfig config = Config(stage, 8 / (world * accumulation), accumulation, world);
            config.bf16.enabled = true;
            if (offload) config.zero_optimization.offload_optimizer.device = "cpu";
            if (offload && stage == 3) config.zero_optimization.offload_param.device = "cpu";
            Gpt model(TinyGpt(), 23);
            auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(comm), torch::kCPU);
            ASSERT_TRUE(engine.ok()) << engine.status();
            auto trained = Train(**engine, model, 0, 3, accumulation, world, rank);
            auto trained_params = TrainedParameters(**engine, model);
            if (rank == 0) {
              losses[offload] = trained;
              params[offload] = trained_params;
            }
          });
        }
        const std::string what = absl::StrCat("stage ", stage, " world ", world, " gas ", accumulation);
        for (size_t step = 0; step < losses[0].size(); ++step) {
          EXPECT_NEAR(losses[0][step], losses[1][step], 2e-2) << what << " step " << step;
        }
        EXPECT_LT(MaxDifference(params[0], params[1]), 2e-2) << what;
      }
    }
  }
}

// On a GPU the gradients stream down on the comm worker's stream into pinned
// memory while backward goes on, and bf16 parameters go up from the host
// step's copy: a missing wait would hand the CPU Adam a gradient still being
// written, and a gradient off by a whole step moves a weight by ~lr = 1e-2.
// Against the same stages on the device (fp32: the SIMD Adam's ~1e-6 per
// step, 2.1e-5 after 4 steps on the H200; bf16: a bf16 step).
TEST(ZeroGpuTest, CpuOffloadOnTheGpuMatchesTheDeviceStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device device(torch::kCUDA, 0);
  for (bool bf16 : {false, true}) {
    for (int stage : {2, 3}) {
      for (int64_t accumulation : {1, 2}) {
        std::vector<std::vector<double>> losses;
        std::vector<std::vector<torch::Tensor>> params;
        for (bool offload : {false, true}) {
          DsConfig config = Config(stage, 8 / accumulation, accumulation, 1);
          config.bf16.enabled = bf16;
          if (offload) config.zero_optimization.offload_optimizer.device = "cpu";
          if (offload && stage == 3) config.zero_optimization.offload_param.device = "cpu";
          Gpt model(TinyGpt(), 29);
          auto engine = Engine::Create(model.ptr(), config, ParallelState::DataParallelOnly(nullptr), device);
          ASSERT_TRUE(engine.ok()) << engine.status();
          std::vector<double> run_losses;
          for (int step = 0; step < 4; ++step) {
            for (int64_t micro = 0; micro < accumulation; ++micro) {
              auto [inputs, targets] = Batch(step * 8 + micro * (8 / accumulation), 8 / accumulation);
              torch::Tensor loss = model->Loss(inputs.to(device), targets.to(device));
              run_losses.push_back(loss.item<double>());
              ASSERT_TRUE((*engine)->Backward(loss).ok());
              auto stepped = (*engine)->Step();
              ASSERT_TRUE(stepped.ok()) << stepped.status();
            }
          }
          ASSERT_TRUE((*engine)->GatherFullParameters().ok());
          losses.push_back(run_losses);
          std::vector<torch::Tensor> values;
          for (const torch::Tensor& p : Parameters(model)) values.push_back(p.cpu().to(torch::kFloat));
          params.push_back(values);
        }
        const std::string what = absl::StrCat(bf16 ? "bf16" : "fp32", " stage ", stage, " gas ", accumulation);
        const double tolerance = bf16 ? 2e-2 : 1e-4;
        for (size_t i = 0; i < losses[0].size(); ++i) {
          EXPECT_NEAR(losses[0][i], losses[1][i], tolerance) << what << " micro-step " << i;
        }
        EXPECT_LT(MaxDifference(params[0], params[1]), tolerance) << what;
      }
    }
  }
}

}  // namespace
}  // namespace dslaunch::runtime
