// The estimate's formulas: DeepSpeed's against its documented example, ours
// by their terms (Engine::Memory() checks them on real ranks in zero_tests).
#include "runtime/estimate/memory_estimate.h"

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/estimate/estimate_report.h"
#include "runtime/offload/swap_sizes.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

std::string Gb(int64_t bytes) { return absl::StrFormat("%.2f", static_cast<double>(bytes) / (1 << 30)); }

// DeepSpeed's memory documentation estimates t5-3b on 1 node x 8 GPUs (its
// largest layer: 32,899,072 parameters); this Ψ reproduces its printed
// figures to their two decimals.
constexpr int64_t kT5Params = 2851598336;
constexpr int64_t kT5LargestLayer = 32899072;

TEST(MemoryEstimateTest, DeepSpeedsZeroTwoEstimateMatchesItsDocumentedExample) {
  const DeviceAndHost offload = DeepSpeedZero2Estimate(kT5Params, 8, 1, true);
  EXPECT_EQ(Gb(offload.per_host), "127.48");
  EXPECT_EQ(Gb(offload.per_gpu), "5.31");
  const DeviceAndHost plain = DeepSpeedZero2Estimate(kT5Params, 8, 1, false);
  EXPECT_EQ(Gb(plain.per_host), "127.48");
  EXPECT_EQ(Gb(plain.per_gpu), "15.93");
}

TEST(MemoryEstimateTest, DeepSpeedsZeroThreeEstimateMatchesItsDocumentedExample) {
  struct Case {
    bool offload, params, zero_init;
    const char* cpu;
    const char* gpu;
  };
  for (const Case& c : {Case{true, true, true, "71.71", "0.12"}, Case{true, true, false, "127.48", "0.12"},
                        Case{true, false, true, "63.74", "0.79"}, Case{true, false, false, "127.48", "0.79"},
                        Case{false, false, true, "1.47", "6.10"}, Case{false, false, false, "127.48", "6.10"}}) {
    const DeviceAndHost e = DeepSpeedZero3Estimate(kT5Params, kT5LargestLayer, 8, 1, c.offload, c.params, c.zero_init);
    EXPECT_EQ(Gb(e.per_host), c.cpu) << c.offload << c.params << c.zero_init;
    EXPECT_EQ(Gb(e.per_gpu), c.gpu) << c.offload << c.params << c.zero_init;
  }
}

TEST(MemoryEstimateTest, OurStatesAreTheZeroFormulasAndOffloadMovesThemToTheHost) {
  ModelSize model;
  model.trainable = 1 << 20;
  model.block = 1000;
  const int64_t psi = model.trainable;
  const int64_t n = 4;
  auto total = [&](const RankStates& r) { return r.parameters + r.gradients + r.master_weights + r.optimizer_state; };
  EXPECT_EQ(total(DslaunchRankStates(model, {0}, n, 2)), 16 * psi);
  EXPECT_EQ(total(DslaunchRankStates(model, {1}, n, 2)), 4 * psi + 12 * psi / n);
  EXPECT_EQ(total(DslaunchRankStates(model, {2}, n, 2)), 2 * psi + 14 * psi / n);
  EXPECT_EQ(total(DslaunchRankStates(model, {3}, n, 2)), 16 * psi / n);
  // fp32: the parameters are the stage-0 masters.
  EXPECT_EQ(total(DslaunchRankStates(model, {0}, n, 4)), 16 * psi);
  EXPECT_EQ(total(DslaunchRankStates(model, {2}, n, 4)), 4 * psi + 16 * psi / n);
  const RankStates offload = DslaunchRankStates(model, {2, true}, n, 2);
  EXPECT_EQ(offload.Device(), 2 * psi + 2 * psi / n);
  EXPECT_EQ(offload.Host(), 12 * psi / n + 4 * psi / n);
  EXPECT_EQ(DslaunchRankStates(model, {2, true, false, true}, n, 2).Host(), 12 * psi / n + 8 * psi / n);
  const RankStates everything = DslaunchRankStates(model, {3, true, true}, n, 2);
  EXPECT_EQ(everything.Device(), 2 * psi / n + 3 * 2 * model.block);
  EXPECT_EQ(everything.Host(), 2 * psi / n + 16 * psi / n);
  // bf16: the CPU Adam's bf16 copy, 2Ψ/N, a buffer of its own except at
  // stage 3 with offload_param, where it is the parameter shard, until
  // delay_update needs a second shard.
  ZeroSetting bf16_stage2{2, true};
  bf16_stage2.bf16 = true;
  EXPECT_EQ(DslaunchRankStates(model, bf16_stage2, n, 2).Host(), 12 * psi / n + 4 * psi / n + 2 * psi / n);
  ZeroSetting bf16_everything{3, true, true};
  bf16_everything.bf16 = true;
  EXPECT_EQ(DslaunchRankStates(model, bf16_everything, n, 2).Host(), 2 * psi / n + 16 * psi / n);
  bf16_everything.delay_update = true;
  EXPECT_EQ(DslaunchRankStates(model, bf16_everything, n, 2).Host(), 2 * psi / n + 20 * psi / n + 2 * psi / n);
}

// Note [Frozen parameters at ZeRO-3]: LoRA's base is whole on every rank up
// to stage 2 and partitioned at stage 3, on the host with offload_param.
TEST(MemoryEstimateTest, AFrozenBaseIsWholeUntilStageThreeCutsIt) {
  ModelSize model;
  model.trainable = 1 << 12;
  model.frozen = 1 << 20;
  const int64_t n = 4, frozen = model.frozen;
  EXPECT_EQ(DslaunchRankStates(model, {2}, n, 2).frozen_parameters, 2 * frozen);
  const RankStates stage3 = DslaunchRankStates(model, {3}, n, 2);
  EXPECT_EQ(stage3.frozen_parameters, 2 * frozen / n);
  EXPECT_EQ(stage3.Device() - DslaunchRankStates(ModelSize{.trainable = model.trainable}, {3}, n, 2).Device(),
            2 * frozen / n);
  const RankStates offloaded = DslaunchRankStates(model, {3, true, true}, n, 2);
  EXPECT_EQ(offloaded.Host() - DslaunchRankStates(ModelSize{.trainable = model.trainable}, {3, true, true}, n, 2).Host(),
            2 * frozen / n);
}

TEST(MemoryEstimateTest, ActivationsFollowThePaperAndCheckpointingKeepsLayerInputs) {
  ModelSize model;
  model.layers = 4;
  model.hidden = 64;
  model.heads = 4;
  model.vocab = 100;
  model.sequence_length = 32;
  const int64_t layer = 34 * 32 * 64;
  const int64_t logits = 32 * 100 * (2 + 4);
  const ActivationEstimate fused = ActivationsPerSample(model, 2, false);
  EXPECT_EQ(fused.per_sample, 4 * layer + logits);
  EXPECT_EQ(fused.per_sample_checkpointed, 4 * 2 * 32 * 64 + layer + logits);
  EXPECT_EQ(ActivationsPerSample(model, 2, true).per_sample, 4 * (layer + 5 * 4 * 32 * 32) + logits);
  EXPECT_EQ(LargestMicroBatch(kGpuReserveBytes + 1000 + 350, 1000, 100), 3);
  EXPECT_EQ(LargestMicroBatch(kGpuReserveBytes, 1000, 100), 0);
}

TEST(MemoryEstimateTest, TheReportNamesEverySettingAndTheLargestMicroBatch) {
  EstimateRequest request;
  request.model.description = "gpt: test";
  request.model.trainable = 1315575808;
  request.model.largest_layer = 103022592;
  request.model.block = 50356224;
  request.model.layers = 24;
  request.model.hidden = 2048;
  request.model.heads = 16;
  request.model.vocab = 50304;
  request.model.sequence_length = 1024;
  request.gpus_per_node = 8;
  request.gpu_memory_gib = 80;
  const std::string report = EstimateReport(request);
  EXPECT_THAT(report, HasSubstr("1,315,575,808 trainable parameters"));
  EXPECT_THAT(report, HasSubstr("| 3 | optimizer, parameters |"));
  EXPECT_THAT(report, HasSubstr("| 2 | offload_optimizer=cpu |"));
  EXPECT_THAT(report, HasSubstr("largest micro batch on 80 GiB (checkpointed)"));
  // ZeRO-0 bf16 on one GPU: 16Ψ = 19.60 GiB of states.
  EXPECT_THAT(report, HasSubstr("| 0 | none | 19.60 GiB | 0.00 GiB | 0.00 GiB |"));
  // ZeRO-Infinity: 12Ψ of masters and moments on the host's drive(s).
  EXPECT_THAT(report, HasSubstr("| 3 | optimizer (NVMe), parameters (NVMe) |"));
  EXPECT_THAT(report, HasSubstr("| 2 | optimizer (NVMe) |"));
}

// Note [Memory estimate], ZeRO-Infinity: what goes to the drive and what the
// host keeps to stream it.
TEST(MemoryEstimateTest, NvmeOffloadMovesTheStatesToTheDriveAndKeepsBuffers) {
  const int64_t psi = 400'000'000, n = 4, shard = psi / n;
  ModelSize model{.trainable = psi};
  model.block = 4'000'000;
  ZeroSetting optimizer{2, true, false};
  optimizer.optimizer_nvme = true;
  const RankStates two = DslaunchRankStates(model, optimizer, n, 2);
  EXPECT_EQ(two.Device(), 2 * psi + 2 * shard) << "the parameters and the gradient shard";
  // One sub-group of 1e8 elements: 3 files, 3 buffer sets of 3 buffers.
  EXPECT_EQ(two.swapped_to_nvme, 3 * SwapFileBytes(shard));
  EXPECT_EQ(two.swap_buffers, 3 * SwapFileBytes(shard));
  EXPECT_EQ(two.Host(), 4 * shard + two.swap_buffers + 2 * shard);
  // Sub-groups are cut at kMaxSwapSubGroupElements: two of them at 2e8 elements a shard.
  const RankStates large = DslaunchRankStates(ModelSize{.trainable = 2 * psi}, optimizer, n, 2);
  EXPECT_EQ(large.swapped_to_nvme, 6 * SwapFileBytes(kMaxSwapSubGroupElements));
  EXPECT_EQ(large.swap_buffers, 2 * 3 * SwapFileBytes(kMaxSwapSubGroupElements));

  ZeroSetting infinity{3, true, true};
  infinity.optimizer_nvme = infinity.param_nvme = true;
  const RankStates three = DslaunchRankStates(model, infinity, n, 2);
  EXPECT_EQ(three.Device(), 2 * shard + 3 * 2 * model.block) << "the gradient shard and the gathered blocks";
  EXPECT_EQ(three.parameter_files, SwapFileBytes(2 * shard / 4));
  EXPECT_EQ(three.parameter_staging, 2 * SwapFileBytes(2 * model.block / n / 4));
  EXPECT_EQ(three.host_parameter_copy, 0);
  EXPECT_EQ(three.Nvme(), three.swapped_to_nvme + three.parameter_files);
  // The optimizer on the host in bf16: its rounded copy stays beside the files.
  ZeroSetting params_only{3, true, true};
  params_only.param_nvme = true;
  params_only.bf16 = true;
  const RankStates host_step = DslaunchRankStates(model, params_only, n, 2);
  EXPECT_EQ(host_step.host_parameter_copy, 2 * shard);
  EXPECT_EQ(host_step.Host(), 12 * shard + 4 * shard + 2 * shard + host_step.parameter_staging);
}

}  // namespace
}  // namespace dslaunch::runtime
