#include "runtime/estimate/model_flops.h"

#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

TEST(ModelFlopsTest, FullTrainingIsSixNPlusTheAttentionTerm) {
  // The ~1.3B GPT of scripts/gpu-throughput-bench.sh, whose awk line
  // computes 6N + 12·L·d·T with the same N.
  ModelSize size;
  size.layers = 24;
  size.hidden = 2048;
  size.sequence_length = 1024;
  size.trainable = GptParameters(GptShape{24, 2048, 50304, 1024});
  // N = V·d + T·d + L·(12d² + 13d) + 2d, as the script has it.
  const int64_t n = 50304 * 2048 + 1024 * 2048 + 24 * (12 * 2048 * 2048 + 13 * 2048) + 2 * 2048;
  EXPECT_EQ(size.trainable, n);
  EXPECT_DOUBLE_EQ(ModelFlopsPerToken(size), 6.0 * n + 12.0 * 24 * 2048 * 1024);
}

TEST(ModelFlopsTest, FrozenParametersCostFourFlopsATokenNotSix) {
  // LoRA: the base carries the forward and the input gradients, not its own.
  ModelSize size;
  size.trainable = 1000;
  size.frozen = 1'000'000;
  EXPECT_DOUBLE_EQ(ModelFlopsPerToken(size), 4.0 * 1'001'000 + 2.0 * 1000);
}

TEST(ModelFlopsTest, PeaksComeFromTheDeviceNameOrAreUnknown) {
  EXPECT_DOUBLE_EQ(PeakTensorFlops("NVIDIA H200"), 989.4e12);
  EXPECT_DOUBLE_EQ(PeakTensorFlops("NVIDIA H100 PCIe"), 756.5e12);
  EXPECT_DOUBLE_EQ(PeakTensorFlops("NVIDIA H100 80GB HBM3"), 989.4e12);
  EXPECT_DOUBLE_EQ(PeakTensorFlops("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_DOUBLE_EQ(PeakTensorFlops("NVIDIA GeForce RTX 4090"), 0);
}

}  // namespace
}  // namespace dslaunch::runtime
